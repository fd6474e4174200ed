"""Beam search (engines.core.beams) in the sequential engine against an oracle nobody here
wrote: transformers' generate with num_beams, num_return_sequences, length_penalty,
do_sample=False, early_stopping="never" and eos_token_id = the request's stop
ids, over the same model (the beam_search check's bite:
tests/testing/checks/test_beam_search.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from engines.protocol import FinishReason, InvalidRequest, Request, SamplingParams, StepOutput
from engines.sequential import SequentialEngine
from tests.helpers import abort_a_beam_search, beam_generate


def _serve(engine: SequentialEngine, prompt: tuple[int, ...],
           params: SamplingParams) -> list[list[StepOutput]]:
    engine.add_request(Request(prompt, params, request_id="b"))
    outs: dict[int, list[StepOutput]] = {}
    while engine.has_work():
        for o in engine.step():
            outs.setdefault(o.index, []).append(o)
    return [outs[i] for i in range(params.n)]


def _cases(count: int) -> list[tuple[tuple[int, ...], SamplingParams]]:
    rng = random.Random(35)
    cases = []
    for _ in range(count):
        prompt = tuple(rng.randrange(1024) for _ in range(rng.randint(1, 8)))
        width = rng.randint(2, 4)
        stride = rng.choice([None, 8, 16])
        stops = () if stride is None else tuple(range(rng.randrange(stride), 1024, stride))
        cases.append((prompt, SamplingParams(
            max_tokens=rng.randint(1, 8), beam_width=width, n=rng.randint(1, width),
            length_penalty=rng.choice([1.0, 0.0, 2.0, -1.0, 0.5]), stop_token_ids=stops)))
    return cases


def test_beams_equal_transformers_generate() -> None:
    engine = SequentialEngine()
    uneven = 0  # cases whose returned beams end at different lengths
    for prompt, params in _cases(24):
        want = beam_generate(engine.model, prompt, params)
        outs = _serve(engine, prompt, params)
        got = [tuple(t for o in child for t in o.token_ids) for child in outs]
        assert got == want, (prompt, params)
        for child, beam in zip(outs, got, strict=True):
            assert len(child) == 1 and child[0].finished  # each beam whole, in one output
            stop = beam[-1] in params.stop_token_ids
            assert child[0].finish_reason == (FinishReason.STOP if stop else
                                              FinishReason.LENGTH)
        uneven += len({len(b) for b in got}) > 1
    assert uneven >= 3  # the length normalisation decided between beams of unequal length


def test_beams_with_min_tokens_equal_transformers_generate() -> None:
    # min_tokens: generate's min_new_tokens, the stop ids at -inf over the raw log-softmax.
    engine = SequentialEngine()
    moved = 0  # cases whose beams min_tokens changed
    for prompt, plain in _cases(24):
        if not plain.stop_token_ids or plain.max_tokens < 2:
            continue
        params = dataclasses.replace(plain, min_tokens=min(3, plain.max_tokens))
        want = beam_generate(engine.model, prompt, params)
        got = [tuple(t for o in child for t in o.token_ids)
               for child in _serve(engine, prompt, params)]
        assert got == want, (prompt, params)
        assert all(len(b) > params.min_tokens or b[-1] not in params.stop_token_ids
                   for b in got)
        moved += got != beam_generate(engine.model, prompt, plain)
    assert moved >= 2


def test_beam_requests_refuse_what_the_search_does_not_do() -> None:
    engine = SequentialEngine()
    for extra in ({"temperature": 1.0}, {"logprobs": 1}, {"top_k": 3}, {"stop": ("a",)}):
        with pytest.raises(InvalidRequest, match="not supported with beam search"):
            engine.add_request(Request((1, 2), SamplingParams(beam_width=2, **extra)))
    with pytest.raises(InvalidRequest, match="n must be <= beam_width"):
        engine.add_request(Request((1, 2), SamplingParams(beam_width=2, n=3)))


def test_aborting_a_beam_search_ends_every_beam() -> None:
    abort_a_beam_search(SequentialEngine(), (1, 2), 2)
