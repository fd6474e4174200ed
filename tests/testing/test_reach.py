"""The suite's reach past an engine's declared limits and into its KV pool: the draws cross
each declared position threshold (a sliding window, a RoPE scaling threshold) and include
near misses of earlier prompts; a request's blocks are bounded from above as well as below;
pools that can overflow get a workload that overflows them; the summary says what it counted
and plainly when there was nothing to count."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings

from engines.models import ZOO_ROPE_THRESHOLD, ZOO_WINDOW, preset_thresholds
from engines.protocol import Capabilities, Request, SamplingParams, capabilities_of
from engines.testing.checks import check_named
from engines.testing.checks.kv_accounting import PAST_PROMPT
from engines.testing.coverage import Coverage
from engines.testing.judging import Judge, Violation
from engines.testing.limits import EngineLimits
from engines.testing.recorder import KVSnapshot, Trace
from engines.testing.seed_workloads import _overflowing, seed_workloads
from engines.testing.strategies import is_near_miss, request_mixes
from engines.testing.workload import Workload
from tests.helpers import JUDGE

# The registry's check, called as the suite calls it: check(trace, judge).
check_kv_accounting = check_named("kv_accounting")
ZOO_LIMITS = EngineLimits(vocab_size=1024, max_model_len=512, block_size=16, kv_blocks=256,
                          kv=True, thresholds=(("RoPE scaling threshold", ZOO_ROPE_THRESHOLD),
                                               ("sliding window", ZOO_WINDOW)))
DRAWS = 300


def _draw_mixes(limits: EngineLimits, n: int = DRAWS) -> list[list[Request]]:
    mixes: list[list[Request]] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None)
    @given(request_mixes(limits))
    def collect(mix: list[Request]) -> None:
        mixes.append(mix)

    collect()
    return mixes


def _crosses(r: Request, at: int) -> bool:
    """Prompt plus budget pass the threshold (what a request does unless it stops early)."""
    return len(r.prompt_token_ids) + r.params.max_tokens > at


def _decoding_across(mixes: list[list[Request]], at: int) -> int:
    return sum(any(len(r.prompt_token_ids) <= at < len(r.prompt_token_ids) + r.params.max_tokens
                   for r in mix) for mix in mixes)


def test_the_draws_cross_every_declared_threshold_often() -> None:
    mixes = _draw_mixes(ZOO_LIMITS)
    control = _draw_mixes(dataclasses.replace(ZOO_LIMITS, thresholds=()))
    for _, at in ZOO_LIMITS.thresholds:
        crossing = sum(any(_crosses(r, at) for r in mix) for mix in mixes)
        decoding = _decoding_across(mixes, at)
        # Measured at 300 draws: 190 to 200 workloads pass 64, 250 to 280 pass 16; 85 to 95
        # cross 64 while decoding, 130 to 160 cross 16 (without the declaration, 45 to 60
        # and 90).
        assert crossing >= DRAWS * 2 // 5, (at, crossing)
        assert decoding >= DRAWS // 4, (at, decoding)
        # The reach comes from the declaration, not from the usual draws: where those
        # seldom get there. At 16 (one block) the usual draws decode across it in a third to
        # a half of the mixes by themselves (90 to 138 of 300 between derandomized
        # sequences), as often as the declared ones, so only the bounds above hold there.
        if at > 2 * ZOO_LIMITS.block:
            assert decoding > _decoding_across(control, at), (at, decoding)


def test_the_draws_hold_near_misses_of_earlier_prompts() -> None:
    mixes = _draw_mixes(ZOO_LIMITS)
    near = [mix for mix in mixes if any(
        is_near_miss(r.prompt_token_ids, q.prompt_token_ids, 16)
        for j, r in enumerate(mix) for q in mix[:j])]
    assert len(near) >= DRAWS // 10, len(near)
    # At a block's last token too (equal up to it).
    at_last = [1 for mix in near for j, r in enumerate(mix) for q in mix[:j]
               if is_near_miss(r.prompt_token_ids, q.prompt_token_ids, 16)
               and next(i for i, (a, b) in enumerate(zip(r.prompt_token_ids,
                                                         q.prompt_token_ids, strict=False))
                        if a != b) % 16 == 15]
    assert at_last


def test_near_misses_of_the_state_machines_earlier_prompts() -> None:
    earlier = (tuple(range(40)),)

    # About 1 draw in 20 is a near miss of `earlier` (a sixth are near-miss kinds, and
    # most of those draw from the mix's own prompts or are reshaped by their budget): 300
    # draws expect ~15, so that a change of Hypothesis's derandomized sequence (new literals
    # anywhere in the package shift it) cannot leave none.
    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(request_mixes(ZOO_LIMITS, min_size=1, max_size=1, earlier=earlier))
    def collect(mix: list[Request]) -> None:
        hits.append(is_near_miss(mix[0].prompt_token_ids, earlier[0], 16))

    hits: list[bool] = []
    collect()
    assert any(hits)


@pytest.mark.parametrize(("prompt", "near"), [
    ((*range(15), 99, 16, 17), True),  # equal up to the first block's last token
    ((0, 1, 99, *range(3, 18)), True),  # one token inside the first block
    ((*range(16), 99, 17), False),  # the change is in a block that is not full
    ((99, 1, 2), False),  # no full block at all
    ((0, 99, 98, *range(3, 18)), False),  # two tokens of the block
    (tuple(range(18)), False),  # the same prompt
])
def test_is_near_miss(prompt: tuple[int, ...], near: bool) -> None:
    assert is_near_miss(prompt, tuple(range(18)), 16) is near


def test_seed_workloads_hold_near_misses_and_threshold_crossings() -> None:
    labels = {w.label: w for w in seed_workloads(ZOO_LIMITS)}
    near = labels["near-miss prompts"].requests
    assert all(is_near_miss(r.prompt_token_ids, near[0].prompt_token_ids, 16) for r in near[1:])
    cross = labels["across the declared position thresholds"].requests
    for _, at in ZOO_LIMITS.thresholds:
        assert any(len(r.prompt_token_ids) <= at < len(r.prompt_token_ids) + r.params.max_tokens
                   for r in cross)
        assert any(len(r.prompt_token_ids) > at for r in cross)


def test_a_pool_that_can_overflow_gets_a_workload_that_overflows_it() -> None:
    w = _overflowing(ZOO_LIMITS, _req, 32, 16)
    assert w is not None
    prompts = sum(-(-len(r.prompt_token_ids) // 16) for r in w.requests)
    total = sum(-(-(len(r.prompt_token_ids) + r.params.max_tokens - 1) // 16)
                for r in w.requests)
    assert prompts <= 32 < total  # every prompt is admitted; their outputs overflow
    # 8 seats of whole contexts (PagedEngine's default before) cannot overflow: no such
    # workload. The default now (16 seats, the same pool) can.
    assert _overflowing(ZOO_LIMITS, _req, 256, 8) is None
    assert dataclasses.replace(ZOO_LIMITS, max_batch_size=8).pool_overflows is False
    assert dataclasses.replace(ZOO_LIMITS, max_batch_size=16).pool_overflows is True
    assert _overflowing(ZOO_LIMITS, _req, 256, 16) is not None


def _req(i: int, prompt: Any, max_tokens: int) -> Request:
    return Request(tuple(prompt), SamplingParams(max_tokens=max_tokens), request_id=f"r{i}")


def test_the_zoo_declares_each_presets_thresholds() -> None:
    from engines.zoo import factory

    assert preset_thresholds("tiny-mistral-swa") == {"sliding window": ZOO_WINDOW}
    assert preset_thresholds("tiny-phi3-longrope") == {
        "RoPE scaling threshold": ZOO_ROPE_THRESHOLD}
    assert preset_thresholds("tiny") == {}
    engine = factory("sequential", "tiny-mistral-swa")()
    assert capabilities_of(engine).position_thresholds == {"sliding window": ZOO_WINDOW}
    assert EngineLimits.of(engine).thresholds == (("sliding window", ZOO_WINDOW),)


def test_a_bad_declaration_names_the_field_and_value() -> None:
    with pytest.raises(ValueError, match=r"position_thresholds: 'sliding window' is 0"):
        Capabilities(position_thresholds={"sliding window": 0})


def _kv_trace(snapshot: KVSnapshot) -> Trace:
    r = Request((1, 2, 3), SamplingParams(max_tokens=2), request_id="r0")
    t = Trace(Workload((r,), (0,)), slots=False, max_batch_size=None)
    t.steps = []
    from engines.testing.recorder import StepRecord

    t.steps.append(StepRecord(0, [], frozenset(), frozenset(), kv=snapshot))
    t.kv_after_drain = KVSnapshot(2, 6, 6, {}, {})
    return t


def test_the_upper_bound_allows_exactly_what_the_engine_declares() -> None:
    held = KVSnapshot(block_size=2, total=6, free=3, tables={"r0": (0, 1, 2)}, cached={"r0": 3})
    with pytest.raises(Violation, match=r"holds 3 block\(s\) of 2 for 3 cached token\(s\): at "
                                        r"most 2 .*declares no kv_extra_blocks"):
        check_kv_accounting(_kv_trace(held), JUDGE)
    check_kv_accounting(_kv_trace(dataclasses.replace(held, extra=1)), JUDGE)
    two_over = dataclasses.replace(held, tables={"r0": (0, 1, 2, 3)}, free=2, extra=1)
    with pytest.raises(Violation, match="plus the 1 extra the engine declares"):
        check_kv_accounting(_kv_trace(two_over), JUDGE)

    class Declares:
        def capabilities(self) -> Capabilities:
            return Capabilities(kv_extra_blocks=1)

    assert capabilities_of(Declares()).kv_extra_blocks == 1
    assert capabilities_of(object()).kv_extra_blocks == 0


def test_the_summary_counts_crossings_and_says_when_nothing_is_declared() -> None:
    r = Request(tuple(range(60)), SamplingParams(max_tokens=8), request_id="r0")
    near = Request((*range(15), 99, *range(16, 60)), SamplingParams(max_tokens=1),
                   request_id="r1")
    t = Trace(Workload((r, near), (0, 0)), slots=False, max_batch_size=None)
    from engines.protocol import StepOutput

    t.outputs = {"r0": [(0, StepOutput("r0", tuple(range(8))))],
                 "r1": [(0, StepOutput("r1", (1,)))]}
    cov = Coverage()
    cov.record(t, ZOO_LIMITS)
    data = cov.as_dict()
    assert data["past the sliding window (16)"] == 2
    assert data["across the RoPE scaling threshold (64) while decoding"] == 1
    assert data["near-miss prompts"] == 1
    assert not any("no position thresholds" in n for n in Coverage.notes(data))
    bare = Coverage()
    bare.record(t, dataclasses.replace(ZOO_LIMITS, thresholds=(), max_batch_size=8))
    notes = Coverage.notes(bare.as_dict())
    assert any("declares no position thresholds" in n for n in notes)
    assert any("256 blocks (kv_total_blocks) hold a whole context for each of the 8 requests"
               in n and "none was drawn to make it preempt" in n for n in notes)
    assert "limits:" not in Coverage.describe(bare.as_dict())


def test_kv_accounting_judges_each_kv_variant_with_its_own_view() -> None:
    bad = KVSnapshot(block_size=2, total=6, free=3, tables={"r0": (0, 1, 2)}, cached={"r0": 3})
    good = dataclasses.replace(bad, tables={"r0": (0, 1)}, free=4)
    ok, leaky = _kv_trace(good), _kv_trace(bad)
    judge = Judge(oracle=None, variants={"small": lambda w: leaky},  # type: ignore[arg-type]
                  kv_variants={"small": "make_engine = small"})
    with pytest.raises(Violation, match=r"(?s)on variant 'small', after step 0.*Variant "
                                        r"'small' is built by:\n\nmake_engine = small"):
        check_kv_accounting(ok, judge)
    quiet = Judge(oracle=None, variants={"small": lambda w: ok},  # type: ignore[arg-type]
                  kv_variants={"small": "make_engine = small"})
    assert check_kv_accounting(ok, quiet) == {"preemptions on variant small": 0, PAST_PROMPT: 0}


def test_a_bad_declaration_is_a_usage_error_naming_the_engine() -> None:
    from engines.factories import EngineSpecError
    from engines.testing.context import build_context
    from examples.toy_engine import ToyEngine

    class Declares(ToyEngine):
        def capabilities(self) -> Capabilities:
            return Capabilities(position_thresholds={"sliding window": -4})

    with pytest.raises(EngineSpecError, match=r"Declares: position_thresholds: 'sliding "
                                              r"window' is -4; expected a positive int"):
        build_context(Declares, name="Declares")


def test_every_drawn_request_fits_the_context_after_its_prompt_is_extended() -> None:
    """A near miss of a prompt under half the context, with a long budget and a penalty, has
    its prompt extended by its own continuation: prompt plus budget must still fit (they did
    not, and vLLM's 64-token context refused such a request served alone: a false crash).
    In a 40-token context with 17- and 18-token earlier prompts, 12 of 3,000 draws passed
    the context before the fix: rare, so many cheap draws."""
    limits = EngineLimits(vocab_size=97, max_model_len=40, block_size=16,
                          sampling_fields=frozenset({"repetition_penalty", "frequency_penalty",
                                                     "presence_penalty", "min_tokens"}))
    earlier = (tuple(range(17)), tuple(range(20, 37)), tuple(range(40, 58)))

    def alone(prompt: Any, params: SamplingParams) -> list[int]:
        return [(len(prompt) + i) % 97 for i in range(params.max_tokens)]

    extended = 0

    @settings(max_examples=3000, derandomize=True, database=None, deadline=None)
    @given(request_mixes(limits, alone=alone, min_size=1, max_size=1, earlier=earlier))
    def fits(mix: list[Request]) -> None:
        nonlocal extended
        r = mix[0]
        assert len(r.prompt_token_ids) + r.params.max_tokens <= limits.max_model_len, r
        penalized = (r.params.repetition_penalty != 1.0 or r.params.frequency_penalty
                     or r.params.presence_penalty)
        extended += bool(penalized and r.params.max_tokens > 16
                         and len(r.prompt_token_ids) > 17)

    fits()
    # The draws reached the case: long budgets beside penalized prompts past the earlier ones
    # (9-12 of the 3,000 as draws were added; a floor of 5 does not break on such a shift).
    assert extended >= 5, extended
