"""Measure the sequence_distribution check on engines: its seed workload run R times on each
factory (fresh unseeded draws every run), each run judged as the suite judges it; prints the
binned TV of every run and how many exceeded the threshold. On correct engines that count is
the measured false-alarm rate; on a planted bug, its catch rate.

    PYTHONPATH=$PWD python scripts/sequence_false_alarms.py RUNS FACTORY [FACTORY ...]

e.g. engines.paged.variants:speculative_draft_sampled engines.paged:PagedEngine
tests.planted.spec_bugs:ResidualNotNormalised. Reference: engines.sequential:SequentialEngine
(the reference's answers are cached across runs: one model, one prompt).
"""

from __future__ import annotations

import statistics
import sys
import time

from engines.factories import load_factory
from engines.sequential import SequentialEngine
from engines.testing.checks import check_named
from engines.testing.checks.sequence_distribution import THRESHOLD, check_sequence_distribution
from engines.testing.context import SuiteOptions, build_context
from engines.testing.features.sequence_draws import sequence_workload
from engines.testing.judging.base import Violation
from engines.testing.recorder import run_workload
from engines.testing.search import drawing_of


def measure(spec: str, runs: int) -> None:
    factory = load_factory(spec)
    ctx = build_context(factory, name=spec, spec=spec,
                        options=SuiteOptions(reference=SequentialEngine))
    w = sequence_workload(drawing_of(ctx, "sequence_distribution"))
    check = check_named("sequence_distribution")
    tvs: list[float] = []
    alarms = 0
    start = time.monotonic()
    for _ in range(runs):
        trace = run_workload(factory(), w)
        try:
            tvs.append(check_sequence_distribution(check, trace, ctx.judge)[2] / 1000)
        except Violation as v:
            alarms += 1
            tvs.append(float(str(v).split("total variation ")[1].split(" ")[0]))
    print(f"{spec}: {runs} runs of {len(w.requests)} requests, {alarms} past {THRESHOLD}; "
          f"binned TV mean {statistics.mean(tvs):.3f}, max {max(tvs):.3f} "
          f"({time.monotonic() - start:.0f} s)", flush=True)
    print("  " + " ".join(f"{t:.3f}" for t in tvs), flush=True)


if __name__ == "__main__":
    for spec in sys.argv[2:]:
        measure(spec, int(sys.argv[1]))
