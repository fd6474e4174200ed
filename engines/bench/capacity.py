"""Capacity and goodput capacity: the highest Poisson arrival rates an engine sustains, found
by bisection on the rate and reported as brackets.

- Throughput capacity: the highest rate whose probe is stable (engines.bench.probes: every
  request finished, no latency growth).
- Goodput capacity: the highest rate whose probe is stable and in which at least the SLO's
  share of requests met both latency targets (engines.bench.slo). Stability is part of it, so
  goodput never exceeds the capacity bracket: its search starts at the capacity and walks down.

Search: each engine's profile (engines.bench.rate_profiles) picks its next rate from its last
verdict: the capacity bracket starts around the closed-batch request rate, widens until its low
end is stable and its high end is not, then bisects at geometric midpoints. Probes at every
rate replay one seed's trace on a stretched time axis, so they differ only in rate. The answer
is the bracket: the highest passing rate probed and the lowest failing one above it.

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

from collections.abc import Callable, Mapping
from typing import Any

from engines.bench.draws import WorkItem
from engines.bench.fresh import FreshPrompts
from engines.bench.probes import MAX_GROWTH, RULE, Probe
from engines.bench.rate_profiles import Capacity, CapacityProfile, GoodputProfile, run_profiles
from engines.bench.replay import Clock
from engines.bench.run_context import RunContext
from engines.bench.slo import Targets
from engines.protocol import Engine

RETRIES = 1
__all__ = ["Capacity", "goodput_many", "planned_rounds", "search", "search_many"]


def _tries(retries: int) -> str:
    if retries == 0:
        return "one try per rate"
    return f"a failing verdict stands only if all {retries + 1} tries failed"


def planned_rounds(iterations: int, retries: int = RETRIES) -> int:
    """Rounds a search runs when one widening step brackets it and every round is retried
    (with several engines bisecting, nearly every round has one whose rate is too high)."""
    return (2 + iterations) * (1 + retries)


def search_many(ctx: RunContext, engines: Mapping[str, Engine], items: list[WorkItem], *,
                start_rates: Mapping[str, float], iterations: int = 4, max_expand: int = 4,
                max_growth: float = MAX_GROWTH, queue_bound_s: float | None = None,
                slo: Targets | None = None, retries: int = RETRIES,
                on_probe: Callable[[Probe], None] | None = None) -> dict[str, Capacity]:
    """Bisect every engine's throughput capacity together, round by round, paired. With an
    SLO, each probe also records its attainment (for plots and tables)."""
    bound = f", p90 queue wait <= {queue_bound_s} s" if queue_bound_s is not None else ""
    rule = RULE.format(growth=max_growth, bound=bound) + f"; {_tries(retries)}"
    profiles = {name: CapacityProfile(start_rates[name], iterations=iterations,
                                      max_expand=max_expand) for name in engines}
    return run_profiles(ctx, engines, items, profiles, rule, retries=retries, on_probe=on_probe,
                       max_growth=max_growth, queue_bound_s=queue_bound_s, slo=slo)


def goodput_many(ctx: RunContext, engines: Mapping[str, Engine], items: list[WorkItem], *,
                 capacities: Mapping[str, Capacity], slo: Targets, iterations: int = 4,
                 max_expand: int = 5, max_growth: float = MAX_GROWTH, retries: int = RETRIES,
                 on_probe: Callable[[Probe], None] | None = None) -> dict[str, Capacity]:
    """Bisect every engine's goodput capacity under `slo`, below its throughput capacity;
    each probe is judged by its own round's targets when `slo` is a PairedSLO."""
    rule = (f"meets the SLO: stable and {slo.describe()}; {_tries(retries)}; searched down to "
            f"capacity / {2 ** max_expand}")
    profiles = {name: GoodputProfile(cap, iterations=iterations, max_expand=max_expand)
                for name, cap in capacities.items()}
    return run_profiles(ctx, engines, items, profiles, rule, retries=retries, on_probe=on_probe,
                       max_growth=max_growth, slo=slo)


def search(engine: Engine, items: list[WorkItem], *, name: str, start_rate: float,
           clock: Clock | None = None, **kwargs: Any) -> Capacity:
    """Bisect on the arrival rate for the highest stable one, starting near `start_rate`."""
    ctx = RunContext(clocks=None if clock is None else {name: clock},
                     fresh=FreshPrompts(int(engine.vocab_size)))
    return search_many(ctx, {name: engine}, items, start_rates={name: start_rate},
                       **kwargs)[name]
