"""The reference run: the open-loop run behind the table's latency rows, each engine at
`reference_load` x its own closed-batch request rate.

With the noisy-host kit (engines.bench.host) that rate is re-timed by paired closed runs just
before the reference run, and the kit's gauge, turning between the steps of both, says how
far the host's speed moved between them (the drift, engines.bench.host.lines). On a shared
host whose speed drifts (the tiny preset's decode step, in CPU time, moved 0.8-1.4 ms between
2-s windows on an idle guest, scripts/host_steadiness.py) a reference run in a slower spell
than its rates were timed in runs past half of capacity, where queueing latency grows as
load / (1 - load): in one quick run every latency ratio moved by 1.3-1.8x. Without the kit,
the closed stage's rate is the basis: nothing is re-timed.
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


@dataclass(frozen=True, slots=True)
class Reference:
    runs: dict[str, Run]  # engines with a rate > 0
    basis_rps: dict[str, float]  # the closed-batch rate, re-timed by the kit (nan: --rate)
    drift: float  # gauge's decode step during the run / during the re-timing (nan: untimed)


def closed_rps(runs: list[Run]) -> float:
    """The closed-batch request rate of paired closed runs: their median."""
    return float(np.median([len(r.trace) / r.wall_s for r in runs]))


def stages(config: Config) -> int:
    """Progress ticks of a reference run: the re-timing runs (the kit on, no --rate), then
    the run."""
    return (RETIME_RUNS if config.host_kit and not config.reference_rps else 0) + 1


def run_reference(ctx: RunContext, engines: dict[str, Engine],
                  closed_trace: traces.ArrivalTrace, items: list[WorkItem], config: Config, *,
                  replica: int, closed: dict[str, float],
                  gauge: TimingSource | None = None) -> Reference:
    """Replay `items` open-loop at the reference rates, paired, on `ctx`'s seed: `--rate`,
    or a share of each engine's closed-batch rate, `closed`, re-timed first when the kit is
    on (config.host_kit); `gauge` (the kit's, turned by ctx.hook) times the host over the
    re-timing and over the run."""
    before = None
    if config.reference_rps:
        basis = dict.fromkeys(engines, float("nan"))
    elif config.host_kit:
        if gauge is not None:
            gauge.restart()
        retimed = ctx.with_(tag=f"r{replica}retime").closed(
            engines, closed_trace, warmup=0, runs=RETIME_RUNS)
        basis = {name: closed_rps(runs) for name, runs in retimed.items()}
        before = gauge.take() if gauge is not None else None
    else:
        basis = {name: closed[name] for name in engines}
    rates = {name: config.reference_rps or config.reference_load * basis[name]
             for name in engines}
    live = {name: rate for name, rate in rates.items() if rate > 0}
    runs = ctx.paired({n: engines[n] for n in live},
                      {n: traces.poisson(items, rate, seed=ctx.seed, tag=f"ref{replica}")
                       for n, rate in live.items()})
    ctx.tick()
    drift = float("nan")
    if gauge is not None and before is not None:  # against a re-timing only
        drift = gauge.take().step_s / before.step_s
    return Reference(runs, basis, drift)
