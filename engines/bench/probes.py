"""One capacity probe: a seeded Poisson trace replayed open-loop at one rate, and its verdicts.

Stable (the throughput-capacity rule) when
  1. every request finished and the driver never gave up (no request waited longer than half
     the trace's span for its first token), and
  2. latency does not grow: the least-squares slopes of queue wait, TTFT and end-to-end latency
     against arrival time are all at most `max_growth` (0.05: under 0.05 s per second of
     trace). Past capacity c the backlog grows and, for a first-come-first-served engine, the
     queue-wait slope approaches rate/c - 1, so 0.05 means the engine kept up with about 95%
     of the offered rate. Queue wait alone can be gamed: an engine that admits every request
     at once keeps queue wait at one step while every request slows down; its TTFT and
     end-to-end latency grow instead, and they are judged too.
  3. if `queue_bound_s` is given, the p90 queue wait is within it.
A slope, not a level, is the default because it is scale-free: the same rule serves a 1 ms CPU
step and a 50 ms GPU step, and it does not penalise static batching's steady wait for the
running batch to drain, only a wait that keeps growing.

Meets the SLO (the goodput rule) when it is stable and at least `slo.attainment` of the
trace's requests finished within both latency targets (engines.bench.slo). With a PairedSLO the
targets are those of the probe's own round, timed between its steps; each probe keeps the SLO
it was judged by.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from engines.bench import traces
from engines.bench.draws import WorkItem
from engines.bench.metrics import requests_frame, slo_met, summarize
from engines.bench.record import COLUMN, ProbeSummary, SLOVerdict, TargetsUsed
from engines.bench.replay import Run
from engines.bench.run_context import RunContext
from engines.bench.slo import SLO, PairedSLO, Targets
from engines.protocol import Engine

MAX_GROWTH = 0.05
# each slope's column (engines.bench.record.ProbeSummary) -> the requests frame's it fits
GROWTH_COLUMNS = {COLUMN.wait_slope: "queue_wait_s", COLUMN.ttft_slope: "ttft_s",
                  COLUMN.e2e_slope: "e2e_s"}
RULE = ("stable: all requests finished, and the least-squares slopes of queue wait, TTFT and "
        "end-to-end latency against arrival time are all <= {growth} s/s{bound}")


@dataclass(slots=True)
class Probe:
    rate: float
    stable: bool
    growth: float  # the largest of the three latency slopes
    attainment: float  # share of requests within the SLO (nan without one)
    summary: ProbeSummary
    run: Run
    slo: SLO | None = None  # the targets `attainment` was measured against

    def meets(self, slo: SLO | None = None) -> bool:
        """Stable and within the SLO: the probe's own (its round's) unless one is given."""
        slo = slo or self.slo
        if slo is None:
            raise ValueError("probe.meets: this probe was run without an SLO")
        if slo is not self.slo:
            attained = float(slo_met(requests_frame(self.run), slo).mean())
            return self.stable and attained >= slo.attainment
        return self.stable and self.attainment >= slo.attainment


def slope(df: Any, column: str) -> float:
    """Least-squares slope of `column` against arrival time (nan with fewer than 2 points)."""
    df = df.dropna(subset=[column])
    if len(df) < 2 or df["arrival_s"].nunique() < 2:
        return float("nan")
    return float(np.polyfit(df["arrival_s"], df[column], 1)[0])


def verdict(run: Run, rate: float, n: int, *, max_growth: float = MAX_GROWTH,
            queue_bound_s: float | None = None, slo: SLO | None = None) -> Probe:
    requests = requests_frame(run)
    figures = summarize(run, requests=requests, slo=slo)
    slopes = {name: slope(requests, column) for name, column in GROWTH_COLUMNS.items()}
    finite = [s for s in slopes.values() if not math.isnan(s)]
    growth = max(finite) if len(finite) == len(slopes) else float("nan")
    stable = not run.gave_up and figures.completed == n and bool(growth <= max_growth)
    if queue_bound_s is not None and stable:
        stable = bool(requests["queue_wait_s"].quantile(0.9) <= queue_bound_s)
    attainment = float(slo_met(requests, slo).mean()) if slo is not None else float("nan")
    judged = None if slo is None else SLOVerdict(
        meets_slo=stable and attainment >= slo.attainment,
        targets=TargetsUsed(slo_ttft_s=slo.ttft_s, slo_itl_s=slo.itl_s))
    summary = ProbeSummary(figures=figures, **slopes, growth=growth, stable=stable,
                           verdict=judged)
    return Probe(rate, stable, growth, attainment, summary, run, slo)


def probe_paired(ctx: RunContext, engines: Mapping[str, Engine], items: list[WorkItem],
                 rates: Mapping[str, float], *, max_growth: float = MAX_GROWTH,
                 queue_bound_s: float | None = None, slo: Targets | None = None,
                 arrivals: str = "poisson", give_up: bool = True) -> dict[str, Probe]:
    """One probe per engine, each at its own rate, run paired (engines.bench.paired) on
    `ctx`'s seed and tag; with a PairedSLO, its gauge (turned by the kit's hook between the
    steps) times the round, whose targets judge every probe of the round. `give_up`: stop
    admitting once a request has waited half the trace's span (a search's probe far past
    capacity ends early); a replay at a rate a user named runs to the end."""
    trace = {name: traces.at_rate(items, rate, arrivals, seed=ctx.seed,
                                  tag=f"p{ctx.tag}{rate:.6g}")
             for name, rate in rates.items()}
    paired = slo if isinstance(slo, PairedSLO) else None
    if paired is not None:
        paired.source.restart()
    runs = ctx.paired({name: engines[name] for name in rates}, trace,
                      give_up_wait_s={name: 0.5 * t.span_s for name, t in trace.items()}
                      if give_up else None)
    judged = paired.close_round() if paired is not None else (
        slo if isinstance(slo, SLO) else None)
    return {name: verdict(run, rates[name], len(items), max_growth=max_growth,
                          queue_bound_s=queue_bound_s, slo=judged)
            for name, run in runs.items()}
