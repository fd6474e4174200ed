"""SLO targets timed with the engines, round by round: a machine that slows down mid-run moves
the targets and the engines alike. Fake engines, a fake timer and virtual clocks share one
modelled Machine whose speed the tests change, so every figure is exact."""

from __future__ import annotations

import pytest

from engines.bench import capacity, draws, traces
from engines.bench.doubles.fake import FakeEngine, FakeTimer, LoggedEngine, Machine, VirtualClock
from engines.bench.host.gauge import MIN_DECODES, MIN_PREFILLS, HostGauge
from engines.bench.paired import run_paired
from engines.bench.probes import Probe
from engines.bench.run_context import RunContext
from engines.bench.slo import SLO, PairedSLO, derive

STEP_S, PREFILL_S = 0.01, 0.02  # the fake timer's quiet timings: targets 50 ms ITL, 60 ms TTFT


def _items(n: int = 200) -> list[draws.WorkItem]:
    return draws.uniform(n, prompt_len=8, max_tokens=6, vocab_size=100)


def _pair(machine: Machine) -> tuple[dict[str, FakeEngine], dict[str, VirtualClock]]:
    """Static and continuous batching of 4 slots on one machine, each on its own clock."""
    clocks = {name: VirtualClock() for name in ("static", "continuous")}
    engines = {name: FakeEngine(max_batch_size=4, static=name == "static", base_s=0.01,
                                prefill_s_per_token=5e-4, clock=clocks[name], machine=machine)
               for name in clocks}
    return engines, clocks


def test_targets_move_with_the_machine_mid_run() -> None:
    machine = Machine()
    engines, clocks = _pair(machine)
    slo = PairedSLO(HostGauge(FakeTimer(step_s=STEP_S, prefill_s=PREFILL_S, machine=machine)),
                    "tiny")

    def slow_down_after_first_round(probe: Probe) -> None:
        machine.factor = 3.0  # another tenant starts: everything takes 3x as long

    caps = capacity.search_many(RunContext(clocks=clocks), engines, _items(),
                                start_rates={"static": 30, "continuous": 40}, iterations=2,
                                slo=slo, on_probe=slow_down_after_first_round)
    first, *later = slo.rounds
    assert later, "the search ran one round only"
    assert first.slo.itl_s == pytest.approx(5 * STEP_S)
    assert first.slo.ttft_s == pytest.approx(3 * PREFILL_S)
    for round_ in later:
        assert round_.slo.itl_s == pytest.approx(3 * 5 * STEP_S)
        assert round_.slo.ttft_s == pytest.approx(3 * 3 * PREFILL_S)
    # Every probe is judged by its own round's targets, recorded with it.
    judged = [p.slo for name in engines for p in caps[name].probes]
    assert all(s in {r.slo for r in slo.rounds} for s in judged)
    assert caps["static"].probes[0].slo is first.slo


def _goodputs(slow_from_goodput: float, *, paired: bool) -> dict[str, float]:
    """Capacity searched on a quiet machine, then goodput searched with the machine slowed."""
    machine = Machine()
    engines, clocks = _pair(machine)
    timer = FakeTimer(step_s=STEP_S, prefill_s=PREFILL_S, machine=machine)
    # Paired: targets timed in every round. Fixed: timed once, at the start (what the bench
    # did before): the slow spell never reaches them.
    slo: SLO | PairedSLO = (PairedSLO(HostGauge(timer), "tiny") if paired
                            else derive(HostGauge(timer).take(), "tiny"))
    ctx = RunContext(clocks=clocks)
    caps = capacity.search_many(ctx, engines, _items(120), iterations=2, slo=slo,
                                start_rates={"static": 30, "continuous": 40})
    machine.factor = slow_from_goodput
    goods = capacity.goodput_many(ctx, engines, _items(120), capacities=caps, slo=slo,
                                  iterations=3)
    return {name: found.low for name, found in goods.items()}


def test_a_slow_spell_keeps_the_goodput_ratio_when_targets_are_paired() -> None:
    quiet = _goodputs(1.0, paired=True)
    assert 0 < quiet["static"] < quiet["continuous"]  # static's TTFT waits for its batch
    ratio = quiet["continuous"] / quiet["static"]
    slowed = _goodputs(2.0, paired=True)
    # Everything slowed alike, targets included: the rates fall, the ratio holds within the
    # bisection's resolution.
    assert slowed["static"] < quiet["static"]
    assert slowed["continuous"] / slowed["static"] == pytest.approx(ratio, rel=0.1)
    # Targets timed once, before the spell, fail the slowed engines for the machine's sake:
    # static's goodput collapses to none and the ratio is lost (as in the busy run:
    # static 1.4 req/s against 82 on a quiet machine).
    fixed = _goodputs(2.0, paired=False)
    assert fixed["static"] == 0.0 < fixed["continuous"]


class _Now:
    """A wall clock the test moves: the timer's calls spend it."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class _SpendingTimer(FakeTimer):
    def __init__(self, now: _Now, **kwargs: float) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.now = now

    def decode(self) -> float:
        self.now.t += self.step_s
        return super().decode()

    def prefill(self) -> float:
        self.now.t += self.prefill_s
        return super().prefill()


def test_yardstick_keeps_to_its_share_takes_means_and_tops_up() -> None:
    now = _Now()
    timer = _SpendingTimer(now, step_s=0.001, prefill_s=0.003)
    stick = HostGauge(timer, share=0.1, now=now)
    for _ in range(2000):  # 2000 engine cycles of 1 ms each
        stick.turn()
        now.t += 0.001
    assert timer.calls > MIN_DECODES + MIN_PREFILLS  # the share, not the minimums, ruled
    times = stick.take()
    decodes, prefills = times.samples
    # Within its share of the round's 2 s (one sample of slack), prefills a fixed share.
    assert decodes * 0.001 + prefills * 0.003 <= 0.1 * now.t + 0.003
    assert prefills >= decodes // 3 - 1
    assert (times.step_s, times.prefill_s) == (pytest.approx(0.001), pytest.approx(0.003))
    # A round too short for the minimums is topped up when it ends; every round starts anew.
    stick.turn()
    short = stick.take()
    assert short.samples == (MIN_DECODES, MIN_PREFILLS)


def test_the_yardstick_gets_a_turn_between_every_cycle_of_engine_steps() -> None:
    log: list[str] = []
    engines = {name: LoggedEngine(name, FakeEngine(max_batch_size=1, base_s=1e-4), log)
               for name in ("a", "b")}
    trace = traces.closed(draws.uniform(1, prompt_len=4, max_tokens=3, vocab_size=100))
    run_paired(engines, dict.fromkeys(engines, trace), between=lambda: log.append("|"))
    assert log == ["|", "a", "b"] * 3 + ["|"]
