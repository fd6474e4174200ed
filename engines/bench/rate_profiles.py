"""Search profiles: objects that choose a stage's next probe rate from its last verdict.

A profile is asked for its first rate (`next_rate(None)`), then for each next one with the
verdict of the last (`next_rate(passed)`), until it answers None; it also says what a verdict
is (`passes`) and where its bracket starts. GuideLLM's profiles are the model (a sweep that
picks its next strategy from the last benchmark's result); the rates here bisect a bracket.

- CapacityProfile: starts at 1.2 x the closed-batch rate and widens by WIDEN until the bracket
  holds the capacity, then bisects at geometric midpoints; a verdict is stability.
- GoodputProfile: starts at the capacity, halves until a rate meets the SLO, then bisects; a
  verdict is stability within the probe's SLO. It reads the capacity search's probes first:
  a rate they saw meet the SLO is a pass already (see `_plan`).
- SweepProfile: the rates given, in order, whatever the verdicts (`batching-bench replay`,
  GuideLLM's constant-rate sweep); a verdict is stability, reported, never acted on.

`run_profiles` drives one profile per engine, round by round, every round's probes paired.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engines.bench.draws import WorkItem
from engines.bench.probes import Probe, probe_paired
from engines.bench.run_context import RunContext
from engines.protocol import Engine

WIDEN = 1.5
Plan = Generator[float, bool, None]


@dataclass(slots=True)
class Capacity:
    engine: str
    low: float  # highest passing rate probed (the reported figure); 0 if none passed
    high: float  # lowest failing rate probed above it; inf if none failed
    rule: str
    probes: list[Probe] = field(default_factory=list)

    def bracket(self) -> str:
        return f"[{self.low:.3g}, {self.high:.3g}) req/s"


def bisect(low: float, high: float, iterations: int) -> Plan:
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


class Profile:
    """The next rate from the last verdict; subclasses give the plan and the verdict."""

    def __init__(self) -> None:
        self._plan: Plan | None = None

    def plan(self) -> Plan:
        raise NotImplementedError

    def passes(self, probe: Probe) -> bool:
        raise NotImplementedError

    def start(self, engine: str, rule: str) -> Capacity:
        """The bracket before any probe of this search."""
        return Capacity(engine, 0.0, float("inf"), rule)

    def next_rate(self, passed: bool | None) -> float | None:
        """The first rate (passed None), or the next one after a verdict; None: done."""
        try:
            if self._plan is None:
                self._plan = self.plan()
                return next(self._plan)
            if passed is None:
                raise ValueError("profile: a verdict is needed after the first rate")
            return self._plan.send(passed)
        except StopIteration:
            return None


class CapacityProfile(Profile):
    def __init__(self, start_rate: float, *, iterations: int, max_expand: int) -> None:
        super().__init__()
        self.start_rate, self.iterations, self.max_expand = start_rate, iterations, max_expand

    def passes(self, probe: Probe) -> bool:
        return probe.stable

    def plan(self) -> Plan:
        """Open-loop capacity is near the closed-batch rate (1.2-1.3x it for the default
        engines, whose closed runs end in a drain): start at 1.2x and walk up or down by
        factors of WIDEN until the bracket holds capacity. 1.5, not 2: a first bracket twice
        as wide costs its probes far past capacity, the slowest there are, and nothing in
        precision. Its bracket only picks the next rate: the search keeps the reported one."""
        low, high = 0.0, float("inf")
        rate = self.start_rate * 1.2
        passed = yield rate
        low, high = (rate, high) if passed else (low, rate)
        for _ in range(self.max_expand):
            rate = rate * WIDEN if passed else rate / WIDEN
            if (yield rate) != passed:
                low, high = (low, rate) if passed else (rate, high)
                break
            low, high = (rate, high) if passed else (low, rate)
        if low == 0.0 or not np.isfinite(high):
            return  # no bracket within max_expand: report the open interval as measured
        yield from bisect(low, high, self.iterations)


def met(capacity: Capacity) -> Probe | None:
    """The highest-rate probe of the capacity search that met its round's SLO, if any."""
    meeting = [p for p in capacity.probes if p.slo is not None and p.meets()]
    return max(meeting, key=lambda p: p.rate, default=None)


class GoodputProfile(Profile):
    def __init__(self, capacity: Capacity, *, iterations: int, max_expand: int) -> None:
        super().__init__()
        self.capacity, self.iterations, self.max_expand = capacity, iterations, max_expand

    def passes(self, probe: Probe) -> bool:
        return probe.meets()

    def start(self, engine: str, rule: str) -> Capacity:
        """Every rate above the capacity bracket's high end is unstable: that is goodput's
        ceiling. The capacity search's highest SLO-meeting probe is goodput's first passing
        verdict (it stays in the capacity search's probes: listed once, counted once)."""
        first = met(self.capacity)
        return Capacity(engine, first.rate if first else 0.0, self.capacity.high, rule)

    def plan(self) -> Plan:
        """Goodput needs stability, so it is at most the throughput capacity: start there and
        halve until a rate meets the SLO, then bisect. A rate the capacity search saw meet the
        same per-round SLO is a pass (a pass needs one try), so the search bisects from there;
        else it starts at the lowest stable rate it saw miss it. Such a miss is one try only,
        so that rate is probed again (with retries) before it counts as failing: the reported
        bracket's high end is always a rate whose every try failed, or capacity's."""
        capacity = self.capacity
        first = met(capacity)
        if capacity.low <= 0 or (first is not None and first.rate >= capacity.low):
            return
        if first is not None:
            yield from bisect(first.rate, capacity.low, self.iterations)
            return
        rate = min((p.rate for p in capacity.probes if p.slo is not None and p.stable),
                   default=capacity.low)
        if (yield rate):
            yield from bisect(rate, capacity.low, self.iterations)
            return
        for _ in range(self.max_expand):
            rate /= 2
            if (yield rate):
                yield from bisect(rate, rate * 2, self.iterations)
                return


class SweepProfile(Profile):
    def __init__(self, rates: Sequence[float]) -> None:
        super().__init__()
        self.rates = list(rates)

    def passes(self, probe: Probe) -> bool:
        return probe.stable

    def plan(self) -> Plan:
        # Not `yield from self.rates`: it would hand each verdict to a list iterator's send().
        for rate in self.rates:  # noqa: UP028
            yield rate


def run_profiles(ctx: RunContext, engines: Mapping[str, Engine], items: list[WorkItem],
                profiles: Mapping[str, Profile], rule: str, *, retries: int,
                on_probe: Callable[[Probe], None] | None,
                **probe_args: Any) -> dict[str, Capacity]:
    """Advance every engine's profile round by round, each round's probes run paired
    (engines.bench.probes.probe_paired, which `probe_args` go to): a failing verdict is
    re-run, paired again with the other failing engines', up to `retries` times, and a rate
    fails only if every try did. `ctx.tag` keeps request ids unique per engine, and `ctx.bar`
    (a stage opened by the caller) ticks once per round, retries included."""
    results = {name: profile.start(name, rule) for name, profile in profiles.items()}
    pending = {name: rate for name, profile in profiles.items()
               if (rate := profile.next_rate(None)) is not None}
    while pending:
        verdicts = dict.fromkeys(pending, False)
        trying = dict(pending)
        for _ in range(retries + 1):
            count = sum(len(r.probes) for r in results.values())
            for name, p in probe_paired(ctx.with_(tag=f"{ctx.tag}{count}"), engines, items,
                                        trying, **probe_args).items():
                results[name].probes.append(p)
                verdicts[name] = profiles[name].passes(p)
                if on_probe is not None:
                    on_probe(p)
            ctx.tick(postfix={n: f"{r:.3g}" for n, r in trying.items()})
            trying = {name: rate for name, rate in trying.items() if not verdicts[name]}
            if not trying:
                break
        for name, rate in list(pending.items()):
            result = results[name]
            if verdicts[name]:
                result.low = max(result.low, rate)
            else:
                result.high = min(result.high, rate)
            following = profiles[name].next_rate(verdicts[name])
            if following is None:
                del pending[name]
            else:
                pending[name] = following
    ctx.finish()
    return results
