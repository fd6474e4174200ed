"""The reference run: the open-loop run behind the table's latency rows, each engine at
`reference_load` x its own closed-batch request rate, that rate re-timed just before it; and
how far the host's speed moved between the re-timing and the run.

Re-timed, not the closed stage's rate: that ran a minute or more earlier, and on a shared host
whose speed drifts (here the tiny preset's decode step, in CPU time, moved 0.8-1.4 ms between
2-s windows on an idle guest, scripts/host_steadiness.py) a reference run in a slower spell
than its rates were timed in runs well past half of capacity, where queueing latencies grow
as load / (1 - load): in one quick run every latency ratio moved by 1.3-1.8x.

The drift: the SLO's yardstick (engines.bench.yardstick) takes its turns between the engines'
steps during the re-timing and during the run, as it does in every probe round, and the ratio
of its mean decode steps says whether the host ran at the speed the rates were set for. A
paired run cancels a slow spell between engines only as far as they slow alike; a latency
ratio at 0.75 of capacity is not the one at 0.5, so a drift past DRIFT_WARNING is reported
with the latency rows it puts in doubt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.bench import traces
from engines.bench.config import Config
from engines.bench.draws import WorkItem
from engines.bench.replay import Run
from engines.bench.run_context import RunContext
from engines.bench.slo import TimingSource
from engines.protocol import Engine

RETIME_RUNS = 3  # paired closed runs that re-time the closed rate before a reference run
DRIFT_WARNING = 1.15  # the host's speed moved by more than this (either way): said


@dataclass(frozen=True, slots=True)
class Reference:
    runs: dict[str, Run]  # engines with a rate > 0
    basis_rps: dict[str, float]  # the re-timed closed-batch rate (nan with --rate)
    drift: float  # yardstick decode step during the run / during the re-timing (nan: untimed)


def closed_rps(runs: list[Run]) -> float:
    """The closed-batch request rate of paired closed runs: their median."""
    return float(np.median([len(r.trace) / r.wall_s for r in runs]))


def stages(config: Config) -> int:
    """Progress ticks of a reference run: the re-timing runs, then the run."""
    return (0 if config.reference_rps else RETIME_RUNS) + 1


def run_reference(ctx: RunContext, engines: dict[str, Engine],
                  closed_trace: traces.ArrivalTrace, items: list[WorkItem], config: Config, *,
                  replica: int, yardstick: TimingSource | None = None) -> Reference:
    """Re-time the closed rates (unless --rate gives one), then replay `items` open-loop at
    the reference rates, paired, on `ctx`'s seed; `yardstick` (the PairedSLO's) times the
    host in both."""
    between = yardstick.turn if yardstick is not None else None
    if config.reference_rps:
        basis = dict.fromkeys(engines, float("nan"))
        before = None
    else:
        retimed = ctx.with_(tag=f"r{replica}retime").closed(
            engines, closed_trace, warmup=0, runs=RETIME_RUNS, between=between)
        basis = {name: closed_rps(runs) for name, runs in retimed.items()}
        before = yardstick.take() if yardstick is not None else None
    rates = {name: config.reference_rps or config.reference_load * basis[name]
             for name in engines}
    live = {name: rate for name, rate in rates.items() if rate > 0}
    # Timed during the run only against a re-timing: with --rate there is none to compare.
    runs = ctx.paired({n: engines[n] for n in live},
                      {n: traces.poisson(items, rate, seed=ctx.seed, tag=f"ref{replica}")
                       for n, rate in live.items()},
                      between=between if before is not None else None)
    ctx.tick()
    drift = float("nan")
    if yardstick is not None and before is not None:
        drift = yardstick.take().step_s / before.step_s
    return Reference(runs, basis, drift)


def drift_line(drifts: list[float]) -> str:
    """The closing text's line on the host's speed over the reference run(s)."""
    timed = [d for d in drifts if np.isfinite(d)]
    if not timed:
        return ("reference run: the host's speed over it was not timed (--rate, or targets "
                "given: no re-timing or no yardstick)")
    worst = max(timed, key=lambda d: abs(np.log(d)))
    text = (f"reference run: the SLO yardstick's decode step took {worst:.2f}x as long as "
            "while its rates were re-timed")
    if max(worst, 1 / worst) > DRIFT_WARNING:
        text += (f" (past {DRIFT_WARNING:g}x: the host's speed moved under it, so its load "
                 "was not the stated share of capacity and the latency rows may not repeat; "
                 "scripts/host_steadiness.py, docs/benchmarks.md: how stable a quick run is)")
    return text
