"""Goodput capacity, the capacity rule that cannot be gamed, SLOs from the hardware, the
admission-disturbance samples: on fake engines and virtual clocks, so every figure is known."""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import pytest

from engines.bench import capacity, disturbance, draws, probes, rate_profiles, traces
from engines.bench.doubles.fake import FakeEngine, FakeTimer, VirtualClock
from engines.bench.doubles.slowdown import SlowedEngine, planted
from engines.bench.paired import run_paired
from engines.bench.run_context import RunContext
from engines.bench.slo import SLO, HardwareTimes, PairedSLO, derive
from engines.protocol import Request, StepOutput


def _items(n: int, max_tokens: int) -> list[draws.WorkItem]:
    return draws.uniform(n, prompt_len=8, max_tokens=max_tokens, vocab_size=100)


# Admits every request at once; a step costs 5 ms plus 10 ms per decoding row. A request needs
# 9 decode row-steps after its first token, so the engine keeps up exactly while
# rate x 9 x 10 ms < 1: its true capacity is 1 / 0.09 = 11.1 req/s, however big its batch.
ROW_S, TOKENS = 0.01, 10
TRUE_RATE = 1 / (ROW_S * (TOKENS - 1))


def _admit_everyone(clock: VirtualClock) -> FakeEngine:
    return FakeEngine(max_batch_size=10**6, base_s=0.005, decode_s_per_row=ROW_S, clock=clock)


def test_admitting_everyone_is_not_rated_above_its_true_capacity() -> None:
    clock = VirtualClock()
    result = capacity.search(_admit_everyone(clock), _items(300, TOKENS), name="greedy",
                             start_rate=TRUE_RATE / 2, iterations=5, clock=clock)
    assert 0.9 * TRUE_RATE <= result.low <= TRUE_RATE, result.bracket()
    assert result.high <= 1.05 * TRUE_RATE, result.bracket()


def test_queue_wait_alone_would_pass_a_probe_past_capacity() -> None:
    # At 1.5x its capacity the engine still admits within a step: queue wait hardly grows, so
    # a queue-wait rule passes it. Its TTFT and end-to-end latency grow, and the rule sees it.
    clock = VirtualClock()
    probe = probes.probe_paired(RunContext(clocks={"greedy": clock}),
                                {"greedy": _admit_everyone(clock)}, _items(300, TOKENS),
                                {"greedy": 1.5 * TRUE_RATE})["greedy"]
    assert probe.summary.wait_slope <= probes.MAX_GROWTH
    assert probe.summary.e2e_slope > probes.MAX_GROWTH and not probe.stable


@functools.cache
def _fifo() -> tuple[dict[str, FakeEngine], dict[str, VirtualClock], capacity.Capacity]:
    # One slot, one-token requests, 0.1 s a step: a 10 req/s first-come-first-served server.
    # Built and searched once; a drained engine serves every later search.
    clocks = {"fifo": VirtualClock()}
    engines = {"fifo": FakeEngine(max_batch_size=1, base_s=0.1, clock=clocks["fifo"])}
    caps = capacity.search_many(RunContext(clocks=clocks), engines, _items(200, 1),
                                start_rates={"fifo": 7.0}, iterations=4)
    return engines, clocks, caps["fifo"]


def _fifo_search(slo: SLO) -> tuple[capacity.Capacity, capacity.Capacity]:
    engines, clocks, cap = _fifo()
    goods = capacity.goodput_many(RunContext(clocks=clocks), engines, _items(200, 1),
                                  capacities={"fifo": cap}, slo=slo, iterations=5)
    return cap, goods["fifo"]


def test_goodput_is_bisected_below_capacity_and_its_bracket_is_exact() -> None:
    # TTFT = queue wait + 0.1 s: a 0.3 s target allows two services of waiting. Replays of one
    # trace at a higher rate only compress the arrivals, so FIFO waits only grow with the rate:
    # every rate at or below the reported goodput passes and every one above fails.
    slo = SLO(ttft_s=0.3, itl_s=1.0, attainment=0.9)
    cap, good = _fifo_search(slo)
    assert 0 < good.low < good.high <= cap.low
    assert good.high / good.low <= 1.03, good.bracket()
    for p in good.probes:
        assert p.meets(slo) == (p.rate <= good.low)
        judged = p.summary.figures.slo
        assert judged is not None and p.attainment == judged.slo_attained
    passing = [p for p in good.probes if p.rate == good.low]
    assert passing and all(p.attainment >= 0.9 for p in passing)
    assert "TTFT <= 300 ms" in good.rule


def test_the_capacity_searchs_slo_verdicts_narrow_the_goodput_search() -> None:
    # The same FIFO server, its capacity searched under the SLO: the goodput search starts
    # from the capacity probes' verdicts, needs fewer probes, and lands on as exact a bracket.
    slo = SLO(ttft_s=0.3, itl_s=1.0, attainment=0.9)
    _, plain = _fifo_search(slo)
    clocks = {"fifo": VirtualClock()}
    engines = {"fifo": FakeEngine(max_batch_size=1, base_s=0.1, clock=clocks["fifo"])}
    ctx = RunContext(clocks=clocks)
    cap = capacity.search_many(ctx, engines, _items(200, 1), start_rates={"fifo": 7.0},
                               iterations=4, slo=slo)["fifo"]
    seeded = capacity.goodput_many(ctx, engines, _items(200, 1), capacities={"fifo": cap},
                                   slo=slo, iterations=5)["fifo"]
    assert len(seeded.probes) < len(plain.probes)
    assert seeded.high / seeded.low <= 1.03, seeded.bracket()
    for p in (*cap.probes, *seeded.probes):  # every verdict agrees with the bracket
        assert p.meets(slo) == (p.rate <= seeded.low), (p.rate, seeded.bracket())
    assert seeded.high <= plain.high * 1.03 and seeded.low >= plain.low / 1.03


def test_a_narrow_bracket_is_bisected_only_to_the_width_asked_for() -> None:
    # 5 steps leave a factor-2 bracket 2.2% wide; one already 1.3x wide needs 4.
    plan = rate_profiles.bisect(100.0, 130.0, 5)
    rates = [next(plan)]
    for _ in range(10):
        try:
            rates.append(plan.send(True))
        except StopIteration:
            break
    assert len(rates) == 4, rates


def test_a_capacity_profile_chooses_the_next_rate_from_the_last_verdict() -> None:
    # 1.2 x the start rate, widened by 1.5 while it passes, then bisected geometrically until
    # the bracket is as narrow as one step leaves a factor-2 one (sqrt 2): then done.
    profile = rate_profiles.CapacityProfile(10.0, iterations=1, max_expand=2)
    assert profile.next_rate(None) == pytest.approx(12.0)
    with pytest.raises(ValueError, match="a verdict is needed"):
        profile.next_rate(None)
    assert profile.next_rate(True) == pytest.approx(18.0)
    assert profile.next_rate(False) == pytest.approx(math.sqrt(12.0 * 18.0))
    assert profile.next_rate(False) is None


def test_a_sweep_profile_takes_the_rates_given_whatever_the_verdicts() -> None:
    # replay's profile: every rate named, in order, a failing one included, then done.
    profile = rate_profiles.SweepProfile([3.0, 1.0, 2.0])
    assert [profile.next_rate(None), profile.next_rate(False), profile.next_rate(True),
            profile.next_rate(False)] == [3.0, 1.0, 2.0, None]


def test_a_generous_slo_gives_the_capacity_and_an_impossible_one_zero() -> None:
    cap, good = _fifo_search(SLO(ttft_s=100.0, itl_s=100.0))
    assert (good.low, good.high) == (cap.low, cap.high) and len(good.probes) == 1
    _, none = _fifo_search(SLO(ttft_s=0.05, itl_s=100.0))  # faster than one service
    assert none.low == 0.0 and all(not p.meets(SLO(0.05, 100.0)) for p in none.probes)


def test_slo_targets_follow_the_hardware_and_overrides() -> None:
    times = HardwareTimes(step_s=0.002, prefill_s=0.01, batch=8, prompt_len=482, basis="x")
    slo = derive(times, "tiny")
    assert slo.ttft_s == pytest.approx(0.03) and slo.itl_s == pytest.approx(0.01)
    assert slo.attainment == 0.9 and "482-token prefill" in slo.basis
    given = slo.override(itl_s=0.5)
    assert (given.ttft_s, given.itl_s) == (slo.ttft_s, 0.5) and "ITL given" in given.basis
    with pytest.raises(ValueError, match="slo.ttft_s"):
        SLO(ttft_s=0.0, itl_s=1.0)
    with pytest.raises(ValueError, match="slo.attainment"):
        SLO(ttft_s=1.0, itl_s=1.0, attainment=1.5)


def test_calibration_times_the_presets_own_forward() -> None:
    from engines.bench import calibration

    timer = calibration.ForwardTimer("tiny", device="cpu", dtype="float32", batch=8,
                                     prompt_len=482)
    # Many decode steps: the batch is prefilled afresh every CONTEXT_STEPS, contexts stay short.
    steps = [timer.decode() for _ in range(2 * calibration.CONTEXT_STEPS + 1)]
    # Prefilling 482 tokens costs more than decoding one token for 8 short rows.
    assert 0 < min(steps) < timer.prefill() < 1.0
    assert timer.basis == "tiny float32 on cpu, transformers forward"


def test_every_prompt_class_gets_five_admissions_into_a_running_batch() -> None:
    classes = draws.prompt_classes(512)
    items = draws.admissions(8, max_model_len=512, vocab_size=100, slots=4, seed=1)
    assert len(items) == 4 + 8 * len(classes)
    clocks = {"c": VirtualClock()}
    engine = FakeEngine(max_batch_size=4, base_s=0.001, prefill_s_per_token=1e-5,
                        clock=clocks["c"])
    run = run_paired({"c": engine}, {"c": traces.closed(items)}, clocks=clocks)["c"]
    _, table = disturbance.spikes(run)
    assert list(table["admitted_prompt_len"]) == list(classes)
    assert (table["steps"] >= disturbance.MIN_SAMPLES).all(), table
    longest = table.iloc[-1]
    assert longest["ci_low"] <= longest["ratio"] <= longest["ci_high"]
    assert longest["ratio"] == pytest.approx((0.001 + classes[-1] * 1e-5) / 0.001)
    samples = disturbance.headline_samples(run)
    assert len(samples) == longest["steps"] and np.median(samples) == longest["ratio"]


class _Sleeper:
    """A protocol engine whose every step sleeps 2 ms on the wall clock."""

    vocab_size, max_model_len = 100, 64

    def __init__(self) -> None:
        self.steps = 0

    def add_request(self, request: Request) -> None:
        pass

    def has_work(self) -> bool:
        return True

    def step(self) -> list[StepOutput]:
        self.steps += 1
        time.sleep(0.002)
        return []


def test_a_planted_slowdown_adds_its_share_of_every_step() -> None:
    inner = _Sleeper()
    slowed = SlowedEngine(inner, 0.5)
    start = time.perf_counter()
    for _ in range(5):
        slowed.step()
    # Spinning only adds time: 5 steps of at least 2 ms, each at least 1.5x.
    assert time.perf_counter() - start >= 5 * 0.002 * 1.5
    assert inner.steps == 5 and slowed.vocab_size == 100 and slowed.max_model_len == 64
    assert planted("static", "0.1") == 0.1
    assert planted("static", "continuous=0.2") == 0.0
    assert planted("continuous", "static=0.3,continuous=0.2") == 0.2
    with pytest.raises(ValueError, match="BENCH_SLOWDOWN"):
        planted("static", "fast")
    assert math.isclose(planted("x", ""), 0.0)


def test_slo_is_derived_unless_both_targets_are_given() -> None:
    from engines.bench.comparison import targets
    from engines.bench.config import Config

    given, once = targets(Config(slo_ttft_s=0.2, slo_itl_s=0.01), 512)
    assert isinstance(given, SLO) and (given.ttft_s, given.itl_s) == (0.2, 0.01)
    assert once is None
    timer = FakeTimer(step_s=0.002, prefill_s=0.01, batch=8, prompt_len=482)
    # The core: one target given, the other derived once, before the run.
    half, once = targets(Config(slo_ttft_s=0.2), 512, timer)
    assert isinstance(half, SLO) and once is not None and once.samples == (12, 4)
    assert half.ttft_s == 0.2 and half.itl_s == pytest.approx(5 * 0.002)
    assert half.basis.startswith("TTFT given; tiny:")
    # The noisy-host kit: derived in every round from its gauge.
    from engines.bench.host.kit import build

    config = Config(slo_ttft_s=0.2, host=True)
    paired, _ = targets(config, 512, timer, build(config, 512, timer=timer))
    assert isinstance(paired, PairedSLO)
    slo = paired.close_round()
    assert slo.ttft_s == 0.2 and slo.itl_s == pytest.approx(5 * 0.002)
    # With no timer given, the preset's own forward is timed, for the longest prompt class.
    real, times = targets(Config(), 512)
    assert isinstance(real, SLO) and times is not None
    assert times.prompt_len == draws.prompt_classes(512)[-1] and times.batch == 8
    assert times.basis == "tiny float32 on cpu, transformers forward, timed once before the run"
