"""The CTranslate2 adapter against transformers' generate and the protocol's translations.
The contract every library adapter shares is tests/adapters/common/test_contract.py.

Skipped where ctranslate2 is not importable: it lives in its own venv, built by
`bash ci/ct2-env.sh` (run these with .venv-ct2/bin/python -m pytest). The first factory call
converts the tiny preset (a few seconds, cached on disk after that).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from engines.protocol import (
    Abortable,
    Engine,
    FinishReason,
    Request,
    SamplingParams,
    capabilities_of,
)
from tests.helpers import (
    drain,
    greedy,
    hf_generate,
    make_prompts,
    preset_generate,
)

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
pytestmark = pytest.mark.skipif(
    not HAS_CT2, reason="ctranslate2 is not installed here: its venv is built by ci/ct2-env.sh")

@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    from engines.adapters.ct2 import make_engine

    eng = make_engine()
    yield eng
    assert not eng.has_work()


def test_factory_declares_what_the_library_has(engine: Engine) -> None:
    from engines.adapters.ct2.variants import ct2_batch1, ct2_max
    from engines.protocol import KVIntrospection, SlotIntrospection

    assert isinstance(engine, Engine) and isinstance(engine, Abortable)
    assert (engine.vocab_size, engine.max_model_len) == (1024, 512)
    assert capabilities_of(engine).max_concurrency == 8
    assert set(capabilities_of(engine).expected_failed_checks) == {"seeds"}
    assert "seed" not in capabilities_of(engine).supported_sampling
    # No slot tables or KV blocks in the library's API: absent, not faked.
    assert not isinstance(engine, SlotIntrospection | KVIntrospection)
    assert not hasattr(engine, "exercised")
    assert capabilities_of(ct2_batch1()).max_concurrency == 1
    assert capabilities_of(ct2_max()).max_concurrency == 16


def test_a_second_factory_call_converts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import engines.adapters.ct2.convert as convert
    from engines.adapters.common.checkpoints import checkpoint_dir, weights_digest

    first = convert.ct2_dir("tiny", 0)
    convert.ct2_dir.cache_clear()

    def refuse(*_: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(convert, "_convert", refuse)
    assert convert.ct2_dir("tiny", 0) == first
    # Named by the weights: another seed's weights would never load this model.
    assert weights_digest(checkpoint_dir("tiny", seed=0, tokenizer=True)) in first.name


@pytest.mark.parametrize("factory", ["make_engine", "ct2_batch1", "ct2_max"])
def test_one_token_prompts_beside_longer_ones(factory: str) -> None:
    import engines.adapters.ct2 as ct2
    import engines.adapters.ct2.variants as variants

    eng = getattr(variants, factory, None) or getattr(ct2, factory)
    prompts = make_prompts([1, 8, 1, 30, 5], seed=3)
    budgets = [5, 4, 3, 6, 2]
    requests = greedy(prompts, budgets)
    got = drain(eng(), requests)
    assert [got[r.request_id][0] for r in requests] == [
        hf_generate(p, n) for p, n in zip(prompts, budgets, strict=True)]


def test_waiting_requests_form_one_batch_and_arrivals_wait(engine: Engine) -> None:
    # Prompts of one length: the library feeds a longer prompt's tail token by token in the
    # decoding loop, so its first token would come steps later.
    early = greedy(make_prompts([6, 6, 6], seed=7), [4, 4, 4])
    late = Request(make_prompts([5], seed=8)[0], SamplingParams(max_tokens=2))
    steps: list[set[object]] = []

    def arrive(step: int, outputs: list) -> None:  # type: ignore[type-arg]
        steps.append({o.request_id for o in outputs if o.token_ids})
        if step == 0:
            engine.add_request(late)

    got = drain(engine, early, on_step=arrive)
    ids = {r.request_id for r in early}
    # One batch: all three get a token in each of 4 steps; the late one starts after them.
    assert steps[:4] == [ids] * 4
    assert steps[4:] == [{late.request_id}] * 2
    assert got[late.request_id] == (hf_generate(late.prompt_token_ids, 2), FinishReason.LENGTH)


def test_one_token_a_step(engine: Engine) -> None:
    (prompt,) = make_prompts([12], seed=9)
    request = Request(prompt, SamplingParams(max_tokens=5))
    seen: list[int] = []
    drain(engine, [request], on_step=lambda _, outs: seen.extend(len(o.token_ids) for o in outs))
    assert seen == [1] * 5


def test_abort_of_a_waiting_request(engine: Engine) -> None:
    (a, b) = make_prompts([4, 5], seed=10)
    first = Request(a, SamplingParams(max_tokens=3), request_id="first")
    engine.add_request(first)
    engine.step()  # first's batch runs; "waiting" arrives after it started
    engine.add_request(Request(b, SamplingParams(max_tokens=3), request_id="waiting"))
    engine.abort_request("waiting")  # type: ignore[attr-defined]
    outputs = []
    while engine.has_work():
        outputs += engine.step()
    assert [o.finish_reason for o in outputs if o.request_id == "waiting"] == [FinishReason.ABORT]
    assert not any(o.token_ids for o in outputs if o.request_id == "waiting")


def test_logprobs_are_none(engine: Engine) -> None:
    (prompt,) = make_prompts([9], seed=4)
    engine.add_request(Request(prompt, SamplingParams(max_tokens=3, logprobs=2)))
    outputs = []
    while engine.has_work():
        outputs += engine.step()
    assert sum(len(o.token_ids) for o in outputs) == 3
    assert all(o.top_logprobs is None and o.logprobs is None for o in outputs)


def test_sampling_options_reach_the_library(engine: Engine) -> None:
    (prompt,) = make_prompts([7], seed=6)
    greedy_tokens = hf_generate(prompt, 5)
    # top_k 1 and a tiny top_p keep the argmax only: greedy, whatever the temperature.
    for params in (SamplingParams(max_tokens=5, temperature=1.0, top_k=1),
                   SamplingParams(max_tokens=5, temperature=1.0, top_p=1e-6)):
        request = Request(prompt, params)
        assert drain(engine, [request])[request.request_id][0] == greedy_tokens
    # The full vocabulary at temperature 1: first-token probabilities on the tiny preset are at
    # most ~0.03, so four 5-token samples agree by chance far below 1e-6.
    free = [Request(prompt, SamplingParams(max_tokens=5, temperature=1.0)) for _ in range(4)]
    got = drain(engine, free)
    assert len({tuple(got[r.request_id][0]) for r in free}) > 1


@pytest.mark.xfail(strict=True, reason="ctranslate2 4.8.5: a batch whose shortest prompt has "
                   "one token gives the longer prompts wrong greedy tokens (docs/findings.md, "
                   "report 14)")
def test_library_one_token_prompt_beside_a_longer_one() -> None:
    import ctranslate2

    from engines.adapters.ct2.convert import ct2_dir, vocabulary

    path = ct2_dir("tiny", 0)
    words = vocabulary(path)
    gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    prompts = make_prompts([1, 8], seed=5)
    results = gen.generate_batch([[words[t] for t in p] for p in prompts], max_length=4,
                                 sampling_topk=1, include_prompt_in_result=False, end_token=[])
    assert [r.sequences_ids[0] for r in results] == [hf_generate(p, 4) for p in prompts]


def test_a_llama_checkpoint_converts_with_the_presets_tokenizer() -> None:
    # The converter loads the architecture's tokenizer for Llama-family checkpoints (a
    # sentencepiece one by default): a preset's checkpoint carries the 1:1 tokenizer, and the
    # converted vocabulary maps id i to its word.
    from engines.adapters.ct2 import make_engine
    from engines.adapters.ct2.convert import ct2_dir, vocabulary

    words = vocabulary(ct2_dir("tiny-llama-rope", 0))
    assert words == [f"t{i}" for i in range(1024)]
    eng = make_engine("tiny-llama-rope")
    (prompt,) = make_prompts([3], seed=3)
    request = Request(prompt, SamplingParams(max_tokens=2))
    # Served (the runtime loads the conversion); its tokens: report 18, below.
    assert len(drain(eng, [request])[request.request_id][0]) == 2


@pytest.mark.xfail(strict=True, reason="ctranslate2 4.8.5: the converter drops Llama-3 RoPE's "
                   "original_max_position_embeddings (docs/findings.md report 18)")
def test_llama3_rope_tokens_match_generate() -> None:
    from engines.adapters.ct2 import make_engine

    eng = make_engine("tiny-llama-rope")
    (prompt,) = make_prompts([40], seed=3)
    request = Request(prompt, SamplingParams(max_tokens=10))
    assert drain(eng, [request])[request.request_id][0] == preset_generate(
        "tiny-llama-rope", prompt, 10)


def test_an_architecture_without_a_loader_is_a_declared_refusal() -> None:
    # ctranslate2 4.8.5 registers no Mixtral loader: the factory's refusal is a ValueError
    # (the matrix's "unsupported"), not a failed conversion.
    from engines.adapters.ct2 import make_engine

    with pytest.raises(ValueError, match="no loader for the architecture.*MixtralConfig"):
        make_engine("tiny-moe")


def test_what_the_converter_drops_is_declared() -> None:
    from engines.adapters.ct2.adapter import converter_losses

    llama3 = {"model_type": "llama", "rope_parameters": {"rope_type": "llama3"}}
    assert set(converter_losses(llama3)) == {"reference_parity"}
    assert "report 18" in converter_losses({"model_type": "gemma2"})["reference_parity"]
    assert converter_losses({"model_type": "qwen2"}) == {}
    assert converter_losses({"model_type": "mistral", "sliding_window": 16}) == {}


# The tiny-mistral-swa preset's window: a prompt of more than window + 1 tokens is prefilled
# in chunks (report 22).
SWA_WINDOW = 16


def _swa_library_tokens(prompts: list[tuple[int, ...]], max_tokens: int) -> list[list[int]]:
    """ctranslate2's own greedy tokens on the tiny-mistral-swa conversion (no adapter)."""
    import ctranslate2

    from engines.adapters.ct2.convert import ct2_dir, vocabulary

    path = ct2_dir("tiny-mistral-swa", 0)
    words = vocabulary(path)
    gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    results = gen.generate_batch([[words[t] for t in p] for p in prompts], max_length=max_tokens,
                                 sampling_topk=1, include_prompt_in_result=False, end_token=[])
    return [r.sequences_ids[0] for r in results]


@pytest.mark.xfail(strict=True, reason="ctranslate2 4.8.5: a sliding-window model's prompt is "
                   "prefilled in chunks of the window, later chunks attending past it "
                   "(docs/findings.md report 22)")
def test_library_sliding_window_prompt_alone_matches_generate() -> None:
    # Alone, the first 23 tokens are forwarded at once: chunks of 16 and 7.
    (prompt,) = make_prompts([24], seed=3)
    assert _swa_library_tokens([prompt], 4) == [preset_generate("tiny-mistral-swa", prompt, 4)]


def test_library_sliding_window_prompt_fed_token_by_token_matches_generate() -> None:
    # Beside a 2-token prompt only one token is forwarded at once and the 24-token prompt's
    # rest is fed one token at a time, where the library keeps the last `window` keys: the
    # model's tokens. So report 22 is the chunked prefill, not the window itself.
    short, prompt = make_prompts([2, 24], seed=3)
    got = _swa_library_tokens([short, prompt], 4)
    assert got[1] == preset_generate("tiny-mistral-swa", prompt, 4)


def test_the_chunked_prefill_is_declared_where_a_prompt_can_be_chunked() -> None:
    from engines.adapters.ct2.adapter import CHUNKED_PREFILL_FAILS, chunked_prefill_fails

    swa = {"model_type": "mistral", "sliding_window": SWA_WINDOW}
    declared = chunked_prefill_fails(swa, 512)
    assert set(declared) == set(CHUNKED_PREFILL_FAILS) == {
        "parity", "reference_parity", "prefill_decode"}
    assert all("report 22" in reason for reason in declared.values())
    # A prompt of window + 1 tokens forwards `window` of them at once: one chunk, the model's.
    assert chunked_prefill_fails(swa, SWA_WINDOW + 2) == {}
    assert chunked_prefill_fails(swa, SWA_WINDOW + 3) != {}
    assert chunked_prefill_fails({"model_type": "mistral", "sliding_window": None}, 512) == {}
    # The Gemma-2 loader drops the window (report 18); a Llama model has none.
    assert chunked_prefill_fails({"model_type": "gemma2", "sliding_window": 16}, 512) == {}
    assert chunked_prefill_fails({"model_type": "llama"}, 512) == {}


def test_the_sliding_window_preset_declares_report_22() -> None:
    from engines.adapters.ct2 import make_engine

    eng = make_engine("tiny-mistral-swa")
    assert set(capabilities_of(eng).expected_failed_checks) == {
        "seeds", "parity", "reference_parity", "prefill_decode"}
