"""The third-party adapters against transformers' generate and the protocol's translations.

Each test runs on both adapters; the vLLM ones skip where vllm is not importable (it lives in
its own venv: ci/vllm-env.sh). One engine per adapter serves the whole module, drained
between tests, as the conformance suite reuses a drained engine.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Mapping

import pytest

from engines.protocol import Engine, FinishReason, InvalidRequest, Request, SamplingParams
from tests.helpers import (
    abort_one_of_two_mid_run,
    assert_generate_tokens_with_mid_run_arrivals,
    drain,
    hf_generate,
    make_prompts,
)

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _hf() -> Engine:
    from engines.adapters.hf.adapter import make_engine

    return make_engine()


def _vllm() -> Engine:
    from engines.adapters.vllm.adapter import make_engine

    return make_engine()


FACTORIES: dict[str, Callable[[], Engine]] = {"hf": _hf, "vllm": _vllm}


@pytest.fixture(
    scope="module",
    params=[
        "hf",
        pytest.param("vllm", marks=pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")),
    ],
)
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    eng = FACTORIES[request.param]()
    yield eng
    assert not eng.has_work()


def test_factory_exposes_limits(engine: Engine) -> None:
    assert isinstance(engine, Engine)
    assert engine.vocab_size == 1024
    assert engine.max_model_len == 512


def test_tokens_match_generate_with_mid_run_arrivals(engine: Engine) -> None:
    assert_generate_tokens_with_mid_run_arrivals(engine, [3, 70, 1, 9])


def test_stop_token_is_included_and_reported(engine: Engine) -> None:
    (prompt,) = make_prompts([8], seed=1)
    free = hf_generate(prompt, 5)
    stop = free[2]
    expected = free[: free.index(stop) + 1]
    request = Request(prompt, SamplingParams(max_tokens=5, stop_token_ids=(stop, 1023)))
    assert drain(engine, [request])[request.request_id] == (expected, FinishReason.STOP)


def test_abort_emits_one_empty_abort_and_frees_the_id(engine: Engine) -> None:
    prompt, rest = abort_one_of_two_mid_run(engine)
    assert all(o.request_id == "other" for o in rest)
    engine.abort_request("victim")  # type: ignore[attr-defined]  # finished now: a no-op
    assert not engine.has_work()
    again = Request(prompt, SamplingParams(max_tokens=4), request_id="victim")
    assert drain(engine, [again])["victim"] == (hf_generate(prompt, 4), FinishReason.LENGTH)


def test_bad_input_is_refused_before_the_library(engine: Engine) -> None:
    (prompt,) = make_prompts([6], seed=3)
    keep = Request(prompt, SamplingParams(max_tokens=5))
    engine.add_request(keep)
    bad = [
        Request((), SamplingParams()),
        Request((1024,), SamplingParams()),
        Request(prompt, SamplingParams(max_tokens=0)),
        Request(prompt, SamplingParams(max_tokens=510)),
        Request(prompt, SamplingParams(), request_id=keep.request_id),
    ]
    for request in bad:
        with pytest.raises(InvalidRequest):
            engine.add_request(request)
    tokens: list[int] = []
    while engine.has_work():
        tokens += [t for o in engine.step() for t in o.token_ids]
    assert tokens == hf_generate(prompt, 5)


def test_top_logprobs_one_per_token_led_by_the_greedy_token(engine: Engine) -> None:
    (prompt,) = make_prompts([9], seed=4)
    request = Request(prompt, SamplingParams(max_tokens=5, logprobs=3))
    engine.add_request(request)
    tokens: list[int] = []
    tops: list[Mapping[int, float]] = []
    while engine.has_work():
        for out in engine.step():
            assert out.top_logprobs is not None and len(out.top_logprobs) == len(out.token_ids)
            tokens += out.token_ids
            tops += out.top_logprobs
    assert len(tops) == 5
    for token, top in zip(tokens, tops, strict=True):
        assert len(top) == 3 and max(top, key=top.__getitem__) == token


def test_seeded_sampling_does_not_depend_on_the_batch(engine: Engine) -> None:
    prompts = make_prompts([7, 30], seed=6)
    sampled = [Request(p, SamplingParams(max_tokens=5, temperature=0.8, seed=11)) for p in prompts]
    alone = [drain(engine, [r])[r.request_id] for r in sampled]
    again = [Request(r.prompt_token_ids, r.params) for r in sampled]
    together = drain(engine, again)
    assert [together[r.request_id] for r in again] == alone
