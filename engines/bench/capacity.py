"""Capacity: the highest Poisson arrival rate an engine sustains, by bisection on the rate.

Stability rule (one probe = one seeded trace of n requests replayed open-loop at a rate):
a probe is stable when
  1. every request finished and the driver never gave up (no request waited longer than half
     the trace's span for its first token), and
  2. the queue stayed bounded: the least-squares slope of queue wait against arrival time is
     at most `max_wait_slope` (0.05: queue wait grows by under 0.05 s per second of trace). Past
     capacity c the queue grows and that slope approaches rate/c - 1, so 0.05 means the engine
     kept up with about 95% or more of the offered rate, and
  3. if `queue_bound_s` is given, the p90 queue wait is within it (an absolute SLO on queueing,
     like Sarathi-Serve's scheduling-delay bound).
A trend, not a level, is the default because it is scale-free: the same rule serves a 1 ms CPU
step and a 50 ms GPU step, and it does not penalise static batching's steady wait for the
running batch to drain, only a wait that keeps growing.

Search: the bracket starts around the closed-batch request rate, widens until its low end is
stable and its high end is not, then bisects. Probes at every rate replay one seed's trace on
a stretched time axis, so they differ only in rate. The answer is the bracket: the highest
stable rate probed and the lowest unstable one above it.

Noise: a shared machine has slow spells (another tenant's burst, CPU steal) that make a probe
below capacity look unstable, and one such verdict early in a bisection costs the engine a
third of its capacity. A slow spell only ever fails a probe, never passes one, so an unstable
verdict is retried (`retries`, default 1) and a rate counts as unstable only if every try was.
Engines are searched together, each round's probes paired step by step (engines.bench.paired),
so drift in the machine's speed hits all of them alike.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.bench import traces
from engines.bench.draws import WorkItem
from engines.bench.metrics import SLO, requests_frame, summarize
from engines.bench.paired import run_paired
from engines.bench.replay import Clock, Run
from engines.protocol import Engine

MAX_WAIT_SLOPE = 0.05
RETRIES = 1
RULE = ("stable: all requests finished, least-squares slope of queue wait vs arrival time "
        "<= {slope}{bound}; an unstable verdict stands only if {tries} tries all failed")


@dataclass(slots=True)
class Probe:
    rate: float
    stable: bool
    wait_slope: float
    summary: dict[str, Any]
    run: Run


@dataclass(slots=True)
class Capacity:
    engine: str
    low: float  # highest stable rate probed (the reported capacity); 0 if none was stable
    high: float  # lowest unstable rate probed above it; inf if none was unstable
    rule: str
    probes: list[Probe] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.low

    def bracket(self) -> str:
        return f"[{self.low:.3g}, {self.high:.3g}) req/s"


def wait_slope(run: Run) -> float:
    df = requests_frame(run).dropna(subset=["queue_wait_s"])
    if len(df) < 2 or df["arrival_s"].nunique() < 2:
        return float("nan")
    return float(np.polyfit(df["arrival_s"], df["queue_wait_s"], 1)[0])


def _verdict(run: Run, rate: float, n: int, *, max_wait_slope: float,
             queue_bound_s: float | None, slo: SLO | None) -> Probe:
    summary = summarize(run, slo=slo)
    slope = wait_slope(run)
    stable = not run.gave_up and summary["completed"] == n and bool(slope <= max_wait_slope)
    if queue_bound_s is not None and stable:
        waits = requests_frame(run)["queue_wait_s"]
        stable = bool(waits.quantile(0.9) <= queue_bound_s)
    summary.update(wait_slope=slope, stable=stable)
    return Probe(rate, stable, slope, summary, run)


def probe_paired(engines: Mapping[str, Engine], items: list[WorkItem],
                 rates: Mapping[str, float], *, seed: int,
                 max_wait_slope: float = MAX_WAIT_SLOPE, queue_bound_s: float | None = None,
                 slo: SLO | None = None, clocks: Mapping[str, Clock] | None = None,
                 tag: str = "") -> dict[str, Probe]:
    """One probe per engine, each at its own rate, run paired (engines.bench.paired)."""
    trace = {name: traces.poisson(items, rate, seed=seed, tag=f"p{tag}{rate:.6g}")
             for name, rate in rates.items()}
    runs = run_paired({name: engines[name] for name in rates}, trace, clocks=clocks,
                      give_up_wait_s={name: 0.5 * t.span_s for name, t in trace.items()})
    return {name: _verdict(run, rates[name], len(items), max_wait_slope=max_wait_slope,
                           queue_bound_s=queue_bound_s, slo=slo)
            for name, run in runs.items()}


def probe(engine: Engine, items: list[WorkItem], rate: float, *, name: str, seed: int,
          max_wait_slope: float = MAX_WAIT_SLOPE, queue_bound_s: float | None = None,
          slo: SLO | None = None, clock: Clock | None = None, tag: str = "") -> Probe:
    """One probe of one engine on `clock` (default: its own EngineClock)."""
    return probe_paired({name: engine}, items, {name: rate}, seed=seed,
                        max_wait_slope=max_wait_slope, queue_bound_s=queue_bound_s, slo=slo,
                        clocks=None if clock is None else {name: clock}, tag=tag)[name]


def _bisection(start_rate: float, iterations: int,
               max_expand: int) -> Generator[float, bool, None]:
    """Yield the rates to probe, receiving each verdict; a generator so that several engines'
    searches can advance round by round. Its bracket only picks the next rate: the caller
    keeps the reported one (Capacity) from the same verdicts."""
    low, high = 0.0, float("inf")
    # Widen: the closed-batch rate is a throughput ceiling for most engines, so start just
    # above it and walk down (or up) by factors of 2 until the bracket holds capacity.
    rate = start_rate * 1.2
    stable = yield rate
    low, high = (rate, high) if stable else (low, rate)
    for _ in range(max_expand):
        rate = rate * 2 if stable else rate / 2
        if (yield rate) != stable:
            low, high = (low, rate) if stable else (rate, high)
            break
        low, high = (rate, high) if stable else (low, rate)
    if low == 0.0 or not np.isfinite(high):
        return  # no bracket within max_expand: report the open interval as measured
    for _ in range(iterations):
        # Geometric midpoint: the bracket spans a factor, and rates are compared as ratios.
        rate = float(np.sqrt(low * high))
        if (yield rate):
            low = rate
        else:
            high = rate


def search_many(engines: Mapping[str, Engine], items: list[WorkItem], *,
                start_rates: Mapping[str, float], seed: int = 0, iterations: int = 4,
                max_expand: int = 4, max_wait_slope: float = MAX_WAIT_SLOPE,
                queue_bound_s: float | None = None, slo: SLO | None = None,
                retries: int = RETRIES, clocks: Mapping[str, Clock] | None = None,
                on_probe: Callable[[Probe], None] | None = None) -> dict[str, Capacity]:
    """Bisect every engine's capacity together: round k runs each engine's k-th probe paired
    with the others' (engines.bench.paired), so drift in the machine's speed hits every
    engine alike instead of whichever happened to run during a slow spell."""
    bound = f", p90 queue wait <= {queue_bound_s} s" if queue_bound_s is not None else ""
    rule = RULE.format(slope=max_wait_slope, bound=bound, tries=retries + 1)
    results = {name: Capacity(name, 0.0, float("inf"), rule) for name in engines}
    plans = {name: _bisection(start_rates[name], iterations, max_expand) for name in engines}
    pending = {name: next(plan) for name, plan in plans.items()}
    while pending:
        verdicts: dict[str, bool] = {}
        todo = dict(pending)
        for _ in range(retries + 1):
            probes = probe_paired(engines, items, todo, seed=seed,
                                  max_wait_slope=max_wait_slope, queue_bound_s=queue_bound_s,
                                  slo=slo, clocks=clocks,
                                  tag=str(sum(len(r.probes) for r in results.values())))
            for name, p in probes.items():
                results[name].probes.append(p)
                if on_probe is not None:
                    on_probe(p)
                verdicts[name] = p.stable
            todo = {name: rate for name, rate in todo.items() if not verdicts[name]}
            if not todo:
                break
        for name, rate in list(pending.items()):
            result = results[name]
            if verdicts[name]:
                result.low = max(result.low, rate)
            else:
                result.high = min(result.high, rate)
            try:
                pending[name] = plans[name].send(verdicts[name])
            except StopIteration:
                del pending[name]
    return results


def search(engine: Engine, items: list[WorkItem], *, name: str, start_rate: float,
           clock: Clock | None = None, **kwargs: Any) -> Capacity:
    """Bisect on the arrival rate for the highest stable one, starting near `start_rate`."""
    return search_many({name: engine}, items, start_rates={name: start_rate},
                       clocks=None if clock is None else {name: clock}, **kwargs)[name]
