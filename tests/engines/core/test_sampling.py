"""The whole sampling surface on our engines: each logits-processing step as transformers'
own processor computes it, per row inside a batch (a neighbour's parameters never reach a
row), min_tokens, the sampled token's logprob, and bad values refused by field."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch
from transformers.generation.logits_process import (
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engines.core.sampling import argmax_rows, filtered, penalized
from engines.core.validation import check_request
from engines.protocol import (
    BASE_PARAMS,
    PROCESSING_PARAMS,
    InvalidRequest,
    Request,
    SamplingParams,
    capabilities_of,
)
from tests.helpers import drain, make_prompts

V = 64


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(V, generator=torch.Generator().manual_seed(seed)) * 3


def test_repetition_penalty_is_transformers_over_prompt_and_output() -> None:
    logits, prompt, output = _logits(), (1, 2, 3, 3), (5, 1)
    ours = penalized(logits, SamplingParams(repetition_penalty=1.7), prompt, output)
    theirs = RepetitionPenaltyLogitsProcessor(1.7)(torch.tensor([prompt + output]),
                                                   logits.clone()[None])[0]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert not torch.equal(ours, logits)  # it bit


def test_frequency_and_presence_penalties_count_the_output_only() -> None:
    logits, prompt, output = _logits(1), (7, 7, 7), (4, 4, 9)
    ours = penalized(logits, SamplingParams(frequency_penalty=0.5, presence_penalty=0.25),
                     prompt, output)
    expected = logits.clone()
    expected[4] -= 2 * 0.5 + 0.25
    expected[9] -= 1 * 0.5 + 0.25
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)  # token 7 (prompt) untouched


def test_min_tokens_masks_the_stop_ids_as_transformers_does() -> None:
    logits, prompt = _logits(2), (1, 2, 3)
    params = SamplingParams(min_tokens=3, stop_token_ids=(5, 6), max_tokens=8)
    processor = MinNewTokensLengthLogitsProcessor(len(prompt), 3, [5, 6])
    for output in ((), (9,), (9, 9), (9, 9, 9)):
        ours = penalized(logits, params, prompt, output)
        theirs = processor(torch.tensor([prompt + output]), logits.clone()[None])[0]
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        assert math.isinf(float(ours[5])) == (len(output) < 3)


@pytest.mark.parametrize(("field", "value", "warper"), [
    ("top_k", 5, TopKLogitsWarper(5)),
    ("top_p", 0.6, TopPLogitsWarper(0.6)),
    ("min_p", 0.2, MinPLogitsWarper(0.2)),
])
def test_each_filter_keeps_what_transformers_keeps(field: str, value: float,
                                                    warper: object) -> None:
    for seed in range(5):
        logits = _logits(seed)
        change: dict[str, Any] = {field: value}
        params = dataclasses.replace(SamplingParams(temperature=0.7), **change)
        ours = filtered(logits, params)
        scaled = TemperatureLogitsWarper(0.7)(None, logits.clone()[None])  # type: ignore[arg-type]
        theirs = warper(None, scaled)[0]  # type: ignore[operator]
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs)), (field, seed)
        torch.testing.assert_close(ours[~torch.isinf(ours)], theirs[~torch.isinf(theirs)])
        assert 1 <= int((~torch.isinf(ours)).sum()) < V


def test_min_p_comes_before_top_p_as_in_vllm() -> None:
    # The order matters: top_p over min_p's survivors keeps fewer tokens than over all.
    logits = torch.tensor([4.0, 3.5, 3.4, 3.3, 0.0, -1.0] + [-9.0] * (V - 6))
    both = filtered(logits, SamplingParams(temperature=1.0, min_p=0.5, top_p=0.5))
    kept = set(torch.nonzero(~torch.isinf(both)).flatten().tolist())
    assert kept == {0, 1}


def _engines() -> list[object]:
    from engines.paged.engine import PagedEngine
    from engines.sequential import SequentialEngine
    from engines.slot.continuous import ContinuousBatchEngine
    from engines.slot.static import StaticBatchEngine

    return [SequentialEngine(), StaticBatchEngine(max_batch_size=4),
            ContinuousBatchEngine(max_batch_size=4), PagedEngine()]


# Neighbours with and without each parameter, greedy and seeded rows mixed, prompts that repeat
# tokens so that penalties bite, and a stop id that greedy decoding would hit early.
def _mix() -> list[Request]:
    prompts = make_prompts([12, 30, 7, 21, 16, 9], seed=3)
    repeated = prompts[0] * 3
    rows = [
        SamplingParams(max_tokens=12, repetition_penalty=1.8),
        SamplingParams(max_tokens=12),
        SamplingParams(max_tokens=12, temperature=0.9, seed=5, top_k=8, logprobs=3),
        SamplingParams(max_tokens=12, frequency_penalty=1.5, presence_penalty=0.5),
        SamplingParams(max_tokens=12, temperature=1.1, seed=9, top_p=0.7, min_p=0.05),
        SamplingParams(max_tokens=12, temperature=0.8, seed=11),
        SamplingParams(max_tokens=12, repetition_penalty=0.7, logprobs=2),
    ]
    return [Request(p, params, request_id=f"r{i}")
            for i, (p, params) in enumerate(zip([repeated, *prompts], rows, strict=True))]


@pytest.fixture(scope="module")
def alone() -> dict[object, list[int]]:
    from engines.sequential import SequentialEngine

    out = {}
    for request in _mix():
        out[request.request_id] = drain(SequentialEngine(), [request])[request.request_id][0]
    return out


@pytest.mark.parametrize("index", range(4), ids=["sequential", "static", "continuous", "paged"])
def test_every_row_of_a_mixed_batch_gets_its_tokens_alone(
        index: int, alone: dict[object, list[int]]) -> None:
    engine = _engines()[index]
    batched = drain(engine, _mix())  # type: ignore[arg-type]
    assert {rid: tokens for rid, (tokens, _) in batched.items()} == alone
    # Every token-choice parameter; the request-level names an engine may add (`lora`,
    # `cache_salt`) are not sampling and change nothing here.
    assert capabilities_of(engine).supported_sampling >= BASE_PARAMS | PROCESSING_PARAMS


def test_the_parameters_change_what_is_generated(alone: dict[object, list[int]]) -> None:
    # Without this, parity above could hold with every parameter ignored: each row that asks
    # for processing gets other tokens than the same row without it.
    from engines.sequential import SequentialEngine

    for request in _mix():
        p = request.params
        plain = SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, seed=p.seed)
        if p == plain:
            continue  # a row without processing
        base = Request(request.prompt_token_ids, plain, request_id="plain")
        tokens = drain(SequentialEngine(), [base])["plain"][0]
        assert tokens != alone[request.request_id], p


def test_min_tokens_holds_back_a_stop_that_greedy_would_hit() -> None:
    from engines.slot.continuous import ContinuousBatchEngine

    prompt = make_prompts([10], seed=4)[0]
    free = drain(ContinuousBatchEngine(), [Request(prompt, SamplingParams(max_tokens=8),
                                                   request_id="f")])["f"][0]
    stop = free[1]  # greedy's second token, as a stop id
    early = SamplingParams(max_tokens=8, stop_token_ids=(stop,))
    held = SamplingParams(max_tokens=8, stop_token_ids=(stop,), min_tokens=5)
    engine = ContinuousBatchEngine()
    out = drain(engine, [Request(prompt, early, request_id="e"),
                         Request(prompt, held, request_id="h")])
    assert len(out["e"][0]) == 2
    tokens, _ = out["h"]
    assert len(tokens) >= 5 and stop not in tokens[:5]


def test_the_sampled_tokens_logprob_comes_with_the_top_ones() -> None:
    from engines.slot.continuous import ContinuousBatchEngine

    engine = ContinuousBatchEngine()
    prompt = make_prompts([9], seed=6)[0]
    engine.add_request(Request(prompt, SamplingParams(max_tokens=4, temperature=1.5, seed=2,
                                                      logprobs=1), request_id="x"))
    seen = 0
    while engine.has_work():
        for out in engine.step():
            assert out.logprobs is not None and out.top_logprobs is not None
            for token, logprob, top in zip(out.token_ids, out.logprobs, out.top_logprobs,
                                           strict=True):
                assert top[token] == logprob <= 0.0
                seen += 1
    assert seen == 4


@pytest.mark.parametrize(("field", "value"), [
    ("top_k", -2), ("top_k", 1.5), ("top_p", 0.0), ("top_p", 1.01), ("top_p", math.nan),
    ("min_p", -0.1), ("min_p", 1.5), ("repetition_penalty", 0.0),
    ("repetition_penalty", math.inf), ("presence_penalty", 2.5), ("frequency_penalty", -2.1),
    ("frequency_penalty", math.nan), ("min_tokens", 9), ("min_tokens", -1),
])
def test_each_new_field_just_past_its_boundary_is_refused_by_name(field: str,
                                                                   value: object) -> None:
    request = Request((1, 2), SamplingParams(max_tokens=8, **{field: value}))  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match=f"^{field}: "):
        check_request(request, vocab_size=V, max_model_len=64, in_flight=(),
                      supported=(BASE_PARAMS | PROCESSING_PARAMS))


def test_an_engine_refuses_a_field_it_does_not_honour_rather_than_ignore_it() -> None:
    request = Request((1, 2), SamplingParams(max_tokens=4, top_k=5))
    with pytest.raises(InvalidRequest, match="^top_k: 5 is not supported by this engine"):
        check_request(request, vocab_size=V, max_model_len=64, in_flight=())
    check_request(request, vocab_size=V, max_model_len=64, in_flight=(),
                  supported=BASE_PARAMS | PROCESSING_PARAMS)
    assert capabilities_of(object()).supported_sampling == BASE_PARAMS


def test_the_suite_draws_what_every_engine_declares_and_names_the_rest() -> None:
    from engines.sequential import SequentialEngine
    from engines.testing.context import _sampling_fields
    from engines.testing.coverage import UNDRAWN, Coverage
    from examples.toy_engine import ToyEngine

    ours, toy = SequentialEngine(), ToyEngine()
    drawn = _sampling_fields([ours, ours])
    assert drawn == capabilities_of(ours).supported_sampling
    assert drawn >= (BASE_PARAMS | PROCESSING_PARAMS)
    # A reference that declares less narrows the draw to what both honour. Tie-aware parity
    # draws the same (engines.testing.judging.processed judges a processed choice there).
    assert _sampling_fields([ours, toy]) == BASE_PARAMS
    notes = Coverage.notes({f"max {UNDRAWN}top_k": 1})
    assert any("declares it in supported_sampling: top_k" in n for n in notes)
    assert "top_k" not in Coverage.describe({f"max {UNDRAWN}top_k": 1, "requests": 3})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_argmax_rows_is_torchs_argmax_on_ties_nans_and_infinities(dtype: torch.dtype) -> None:
    # Greedy and sampled tokens (argmax of probs / noise) come from argmax_rows, which takes
    # numpy's argmax on a CPU's fp32 rows: it must pick what torch.argmax picks, first of ties,
    # a NaN over everything, in a transposed (strided) batch too.
    gen = torch.Generator().manual_seed(0)
    for trial in range(400):
        n = int(torch.randint(1, 6, (1,), generator=gen))
        v = int(torch.randint(1, 40, (1,), generator=gen))
        x = torch.randint(-3, 4, (n, v), generator=gen).float()  # few values: many ties
        pick = torch.rand(n, v, generator=gen)
        x[pick < 0.05] = math.nan
        x[(pick >= 0.05) & (pick < 0.1)] = math.inf
        x[(pick >= 0.1) & (pick < 0.2)] = -math.inf
        x[(pick >= 0.2) & (pick < 0.25)] = -0.0
        if trial % 4 == 0:
            x[:] = -math.inf
        if trial % 3 == 0:
            x = x.t().contiguous().t()
        x = x.to(dtype)
        assert argmax_rows(x) == x.argmax(dim=-1).tolist(), x
