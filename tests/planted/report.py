"""Measure the suite against every planted bug: `python -m tests.planted.report`.

For each bug: with the seed workloads (what a suite run does), the time to the reported
failure and the counterexample's size; and with the Hypothesis search alone (seeds off), the
time and number of examples to the first failure, then the size after shrinking.
"""

from __future__ import annotations

import re
import time
from typing import Any

from hypothesis import Phase

from engines.testing.properties import Violation
from engines.testing.suite import Suite
from tests.planted.continuous_bugs import CONTINUOUS_PLANTED
from tests.planted.toy_bugs import PLANTED

_SIZE = re.compile(r"Counterexample \((\d+) request\(s\), (\d+) bad, (\d+) abort\(s\), (\d+) step")
_LEAK = re.compile(r"Counterexample \((\d+) earlier workload\(s\) of (\d+) request\(s\), "
                   r"then (\d+) request")


def measure(bug: Any, *, seeds: bool, shrink: bool) -> tuple[float, str, int]:
    suite = Suite(bug, name=bug.__name__)
    suite.use_seeds = seeds
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    suite.overrides = {"max_examples": 1000, "derandomize": True, "database": None,
                       "phases": phases}
    suite.prepare()
    start = time.perf_counter()
    try:
        suite.check(bug.caught_by)
    except Violation as v:
        m, leak = _SIZE.search(str(v)), _LEAK.search(str(v))
        size = (f"{m[1]} req + {m[2]} bad + {m[3]} abort, {m[4]} steps" if m else
                f"{leak[3]} req after {leak[1]} workload(s) of {leak[2]}" if leak else "?")
        return time.perf_counter() - start, size, suite.examples
    return time.perf_counter() - start, "NOT CAUGHT", suite.examples


def main() -> None:
    import torch

    torch.set_num_threads(1)  # the tiny model gains nothing from threads
    print(f"{'bug':22} {'property':18} {'suite: s':>8}  {'size':32} {'search: s':>9} "
          f"{'examples':>8}  shrunk size")
    for bug in [*PLANTED, *CONTINUOUS_PLANTED]:
        t_seed, size_seed, _ = measure(bug, seeds=True, shrink=True)
        t_first, _, n = measure(bug, seeds=False, shrink=False)
        _, size_search, _ = measure(bug, seeds=False, shrink=True)
        print(f"{bug.__name__:22} {bug.caught_by:18} {t_seed:8.3f}  {size_seed:32} "
              f"{t_first:9.3f} {n + 1:8}  {size_search}", flush=True)


if __name__ == "__main__":
    main()
