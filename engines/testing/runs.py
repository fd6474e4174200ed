"""Runs of a workload shared between checks: every check of an engine that meets the same
workload judges the one trace recorded when it was first served.

The checks are separate tests, and most draw from one strategy under one seed per session
(engines.testing.search), so without this each would serve every workload again. A trace is
what one engine of the factory did with the workload; judging it again for another check is
judging that same run, and a failure on it is confirmed on a fresh engine exactly as a
failure of a run of its own would be (engines.testing.verdict).
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.testing.recorder import Trace
from engines.testing.workload import Workload

__all__ = ["MAX_RUNS", "KeptRun", "RunCache"]

# Traces kept per factory: enough for a thorough profile's three workload streams (400
# examples each) and their seed workloads, at a few kB pickled a trace (measured: 4 kB mean,
# 42 kB the largest, on the paged engine). Past it, new runs are not kept: the checks meet a
# stream in the same order, so the first runs kept are the ones met again.
MAX_RUNS = 2048


@dataclass(frozen=True, slots=True)
class KeptRun:
    trace: Trace  # a run that finished: no crash, no stall
    fresh: bool  # served on a freshly built engine
    history: tuple[Workload, ...]  # what that engine had served before, oldest first


class RunCache:
    """Traces of finished runs, by workload (its label aside)."""

    def __init__(self, limit: int = MAX_RUNS) -> None:
        self.limit = limit
        self.hits = 0
        self._runs: dict[Workload, KeptRun] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def workloads(self) -> list[Workload]:
        """The workloads kept, in the order they were first served."""
        return list(self._runs)

    def get(self, w: Workload) -> KeptRun | None:
        run = self._runs.get(w)
        if run is not None:
            self.hits += 1
        return run

    def keep(self, w: Workload, trace: Trace | None, *, fresh: bool,
             history: tuple[Workload, ...]) -> None:
        """Keep a run for the next check that meets w: only one that finished (a crash or a
        stall is judged by the check that met it, and replayed for any other)."""
        if trace is None or trace.stalled or len(self._runs) >= self.limit:
            return
        self._runs.setdefault(w, KeptRun(trace, fresh, history))
