"""Capacity and goodput capacity: the highest Poisson arrival rates an engine sustains, found
by bisection on the rate and reported as brackets.

- Throughput capacity: the highest rate whose probe is stable (engines.bench.probes: every
  request finished, no latency growth).
- Goodput capacity: the highest rate whose probe is stable and in which at least the SLO's
  share of requests met both latency targets (engines.bench.slo). Stability is part of it, so
  goodput never exceeds the capacity bracket: its search starts at the capacity and walks down.

Search: the capacity bracket starts around the closed-batch request rate, widens by factors of
2 until its low end is stable and its high end is not, then bisects at geometric midpoints.
Probes at every rate replay one seed's trace on a stretched time axis, so they differ only in
rate. The answer is the bracket: the highest passing rate probed and the lowest failing one
above it.

Noise: a shared machine has slow spells (another tenant's burst, CPU steal) that make a probe
below capacity fail, and one such verdict early in a bisection costs the engine a third of
its capacity. A slow spell only ever fails a probe, never passes one, so a failing verdict is
retried (`retries`, default 1) and a rate fails only if every try failed. Engines are searched
together: round k runs every engine's k-th probe paired step by step (engines.bench.paired),
and a retry re-runs, paired again, the engines whose verdict failed. An engine that passed is
not run again: a rate passes if any of its tries did, so a second try could change nothing,
and every engine still gets the same tries at a failing rate. With a PairedSLO, every round
(retries too) times its own targets between its steps.

Cost: a search runs at most 1 + max_expand + iterations rounds, each retried at most
`retries` times, each probe at most `len(items)` requests; `planned_rounds` is the count
when the first widening step brackets the answer and every round is retried once, which the
progress bar shows as its total (growing it if a search needs more, cutting it if fewer).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.bench.clocks import TimeSource
from engines.bench.devices import Sync
from engines.bench.draws import WorkItem
from engines.bench.probes import MAX_GROWTH, RULE, Probe, probe_paired
from engines.bench.progress import Progress
from engines.bench.replay import Clock
from engines.bench.slo import Targets
from engines.protocol import Engine

RETRIES = 1
WIDEN = 1.5
Plan = Generator[float, bool, None]


@dataclass(slots=True)
class Capacity:
    engine: str
    low: float  # highest passing rate probed (the reported figure); 0 if none passed
    high: float  # lowest failing rate probed above it; inf if none failed
    rule: str
    probes: list[Probe] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.low

    def bracket(self) -> str:
        return f"[{self.low:.3g}, {self.high:.3g}) req/s"


def _capacity_plan(start_rate: float, iterations: int, max_expand: int) -> Plan:
    """Yield the rates to probe, receiving each verdict; a generator so that several engines'
    searches can advance round by round. Its bracket only picks the next rate: the caller
    keeps the reported one (Capacity) from the same verdicts."""
    low, high = 0.0, float("inf")
    # Open-loop capacity is near the closed-batch rate (1.2-1.3x it for the default engines,
    # whose closed runs end in a drain): start at 1.2x and walk up or down by factors of
    # WIDEN until the bracket holds capacity. 1.5, not 2: a first bracket twice as wide costs
    # its probes far past capacity, the slowest there are, and nothing in precision.
    rate = start_rate * 1.2
    passed = yield rate
    low, high = (rate, high) if passed else (low, rate)
    for _ in range(max_expand):
        rate = rate * WIDEN if passed else rate / WIDEN
        if (yield rate) != passed:
            low, high = (low, rate) if passed else (rate, high)
            break
        low, high = (rate, high) if passed else (low, rate)
    if low == 0.0 or not np.isfinite(high):
        return  # no bracket within max_expand: report the open interval as measured
    yield from _bisect(low, high, iterations)


def _met(capacity: Capacity) -> Probe | None:
    """The highest-rate probe of the capacity search that met its round's SLO, if any."""
    met = [p for p in capacity.probes if p.slo is not None and p.meets()]
    return max(met, key=lambda p: p.rate, default=None)


def _goodput_plan(capacity: Capacity, iterations: int, max_expand: int) -> Plan:
    """Goodput needs stability, so it is at most the throughput capacity: start there and
    halve until a rate meets the SLO, then bisect.

    When the capacity search ran under the same per-round SLO its probes narrow this for
    free: a rate they saw meet it is a passing verdict (a pass needs one try), so the search
    bisects from there; else it starts at the lowest stable rate they saw miss it. Such a miss
    is one try only, so that rate is probed again (with retries) before it counts as failing:
    the reported bracket's high end is always a rate whose every try failed, or the capacity
    bracket's."""
    met = _met(capacity)
    if capacity.low <= 0 or (met is not None and met.rate >= capacity.low):
        return
    if met is not None:
        yield from _bisect(met.rate, capacity.low, iterations)
        return
    rate = min((p.rate for p in capacity.probes if p.slo is not None and p.stable),
               default=capacity.low)
    if (yield rate):
        yield from _bisect(rate, capacity.low, iterations)
        return
    for _ in range(max_expand):
        rate /= 2
        if (yield rate):
            yield from _bisect(rate, rate * 2, iterations)
            return


def _bisect(low: float, high: float, iterations: int) -> Plan:
    """Geometric bisection (the bracket spans a factor, and rates are compared as ratios)
    until the bracket is as narrow as `iterations` steps leave a factor-2 one: a bracket that
    starts narrower needs fewer."""
    width = 2.0 ** (0.5 ** iterations)
    while high / low > width * (1 + 1e-9):
        rate = float(np.sqrt(low * high))
        if (yield rate):
            low = rate
        else:
            high = rate


def _tries(retries: int) -> str:
    if retries == 0:
        return "one try per rate"
    return f"a failing verdict stands only if all {retries + 1} tries failed"


def planned_rounds(iterations: int, retries: int = RETRIES) -> int:
    """Rounds a search runs when one widening step brackets it and every round is retried
    (with several engines bisecting, nearly every round has one whose rate is too high)."""
    return (2 + iterations) * (1 + retries)


def _run_rounds(engines: Mapping[str, Engine], items: list[WorkItem],
                plans: dict[str, Plan], results: dict[str, Capacity],
                passes: Callable[[Probe], bool], *, retries: int, tag: str,
                on_probe: Callable[[Probe], None] | None, bar: Progress | None,
                **probe_args: Any) -> None:
    """Advance every plan round by round; `tag` keeps request ids unique per engine. `bar`
    (a stage opened with planned_rounds) ticks once per round, retries included."""
    pending: dict[str, float] = {}
    for name, plan in plans.items():
        try:
            pending[name] = next(plan)
        except StopIteration:  # nothing to probe (goodput of an engine with no capacity)
            pass
    while pending:
        verdicts = dict.fromkeys(pending, False)
        trying = dict(pending)
        for _ in range(retries + 1):
            count = sum(len(r.probes) for r in results.values())
            for name, p in probe_paired(engines, items, trying, tag=f"{tag}{count}",
                                        **probe_args).items():
                results[name].probes.append(p)
                verdicts[name] = passes(p)
                if on_probe is not None:
                    on_probe(p)
            if bar is not None:
                bar.tick(postfix={n: f"{r:.3g}" for n, r in trying.items()})
            trying = {name: rate for name, rate in trying.items() if not verdicts[name]}
            if not trying:
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
    if bar is not None:
        bar.finish()


def search_many(engines: Mapping[str, Engine], items: list[WorkItem], *,
                start_rates: Mapping[str, float], seed: int = 0, iterations: int = 4,
                max_expand: int = 4, max_growth: float = MAX_GROWTH,
                queue_bound_s: float | None = None, slo: Targets | None = None,
                retries: int = RETRIES, clocks: Mapping[str, Clock] | None = None,
                sync: Sync | None = None, tag: str = "c",
                on_probe: Callable[[Probe], None] | None = None,
                bar: Progress | None = None,
                time_source: TimeSource | None = None) -> dict[str, Capacity]:
    """Bisect every engine's throughput capacity together, round by round, paired. With an
    SLO, each probe also records its attainment (for plots and tables)."""
    bound = f", p90 queue wait <= {queue_bound_s} s" if queue_bound_s is not None else ""
    rule = (RULE.format(growth=max_growth, bound=bound)
            + f"; {_tries(retries)}")
    results = {name: Capacity(name, 0.0, float("inf"), rule) for name in engines}
    plans = {name: _capacity_plan(start_rates[name], iterations, max_expand)
             for name in engines}
    _run_rounds(engines, items, plans, results, lambda p: p.stable, retries=retries, tag=tag,
                on_probe=on_probe, bar=bar, seed=seed, max_growth=max_growth,
                queue_bound_s=queue_bound_s, slo=slo, clocks=clocks, sync=sync,
                time_source=time_source)
    return results


def goodput_many(engines: Mapping[str, Engine], items: list[WorkItem], *,
                 capacities: Mapping[str, Capacity], slo: Targets, seed: int = 0,
                 iterations: int = 4, max_expand: int = 5, max_growth: float = MAX_GROWTH,
                 retries: int = RETRIES, clocks: Mapping[str, Clock] | None = None,
                 sync: Sync | None = None, tag: str = "g",
                 on_probe: Callable[[Probe], None] | None = None,
                 bar: Progress | None = None,
                 time_source: TimeSource | None = None) -> dict[str, Capacity]:
    """Bisect every engine's goodput capacity under `slo`, below its throughput capacity;
    each probe is judged by its own round's targets when `slo` is a PairedSLO."""
    rule = (f"meets the SLO: stable and {slo.describe()}; {_tries(retries)}; searched down to "
            f"capacity / {2 ** max_expand}")
    # Every rate above the capacity bracket's high end is unstable: that is goodput's ceiling.
    # The capacity search's highest SLO-meeting probe is goodput's first passing verdict (it
    # stays in the capacity search's probes: listed once, its run counted once).
    results = {name: Capacity(name, getattr(_met(cap), "rate", 0.0), cap.high, rule)
               for name, cap in capacities.items()}
    plans = {name: _goodput_plan(cap, iterations, max_expand)
             for name, cap in capacities.items()}
    _run_rounds(engines, items, plans, results, lambda p: p.meets(), retries=retries,
                tag=tag, on_probe=on_probe, bar=bar, seed=seed, max_growth=max_growth, slo=slo,
                clocks=clocks, sync=sync, time_source=time_source)
    return results


def search(engine: Engine, items: list[WorkItem], *, name: str, start_rate: float,
           clock: Clock | None = None, **kwargs: Any) -> Capacity:
    """Bisect on the arrival rate for the highest stable one, starting near `start_rate`."""
    return search_many({name: engine}, items, start_rates={name: start_rate},
                       clocks=None if clock is None else {name: clock}, **kwargs)[name]
