"""Measure the suite against every planted bug: `python -m tests.planted.report [--quick]`.

For each bug, under the batching-ci profile: the label of the report that caught it (which
must be the bug's `caught_by`), the seconds to that report with the seed workloads (what a
suite run does), the counterexample's size, and the seconds the Hypothesis search takes alone
(seeds off) to its first failure. --quick skips the search-alone column.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from typing import Any

from hypothesis import Phase
from hypothesis import settings as Settings

from engines.testing.profiles import register_profiles
from tests.planted.catalog import ALL_PLANTED
from tests.planted.harness import check_of, hunt

_SIZE = re.compile(r"Counterexample \((\d+) request\(s\), (\d+) bad, (\d+) abort\(s\), (\d+) step")
_ALONE = "The request alone on a fresh engine, which"
_LEAK = re.compile(r"Counterexample \((\d+) earlier workload\(s\) of (\d+) request\(s\), "
                   r"then (\d+) request")


def _size(text: str) -> str:
    m, leak = _SIZE.search(text), _LEAK.search(text)
    if m:
        return f"{m[1]} req + {m[2]} bad + {m[3]} abort, {m[4]} steps"
    if leak:
        return f"{leak[3]} req after {leak[1]} workload(s) of {leak[2]}"
    if _ALONE in text:  # a crash of the alone oracle's: the request on its own
        return "1 req alone"
    return "?"


def measure(bug: Any, *, seeds: bool, settings: Settings) -> tuple[float, str, str]:
    """(seconds, label of the report or 'NOT CAUGHT', counterexample size)."""
    start = time.perf_counter()
    caught = hunt(bug, seeds=seeds, settings=settings)
    took = time.perf_counter() - start
    if caught is None:
        return took, "NOT CAUGHT", ""
    return took, caught.prop, _size(str(caught))


def main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(1)  # the tiny model gains nothing from threads
    register_profiles()
    ci = Settings.get_profile("batching-ci")
    first_failure = Settings(ci, phases=[Phase.generate])
    quick = "--quick" in argv
    print(f"{'bug':24} {'check':18} {'caught as':18} {'suite s':>8}  {'counterexample':34}"
          + ("" if quick else f" {'search s':>8}"))
    times, missed = [], []
    for bug in ALL_PLANTED:
        took, label, size = measure(bug, seeds=True, settings=ci)
        times.append(took)
        if label != bug.caught_by:
            missed.append(bug.__name__)
        line = f"{bug.__name__:24} {check_of(bug):18} {label:18} {took:8.2f}  {size:34}"
        if not quick:
            alone, alone_label, _ = measure(bug, seeds=False, settings=first_failure)
            line += f" {alone:8.2f}" + ("" if alone_label == bug.caught_by else " (missed)")
        print(line, flush=True)
    print(f"\n{len(ALL_PLANTED) - len(missed)} of {len(ALL_PLANTED)} planted bugs caught as "
          f"intended; median {statistics.median(times):.2f} s, max {max(times):.2f} s to a "
          "report (batching-ci, seeds then search)")
    if missed:
        print("caught otherwise or not at all: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
