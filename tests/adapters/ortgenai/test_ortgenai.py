"""The onnxruntime-genai adapter against transformers' generate and the protocol's translations.
The contract every library adapter shares is tests/adapters/common/test_contract.py.

Skipped where onnxruntime_genai is not importable: it lives in its own venv, built by
`bash ci/ortgenai-env.sh` (run these with .venv-ortgenai/bin/python -m pytest). The first
factory call builds the tiny preset's ONNX model (about 30 s, cached on disk after that).
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import pytest

from engines.protocol import (
    Abortable,
    Engine,
    FinishReason,
    KVIntrospection,
    Request,
    SamplingParams,
)
from tests.helpers import (
    drain,
    greedy,
    hf_generate,
    make_prompts,
    preset_generate,
)

HAS_ORTGENAI = importlib.util.find_spec("onnxruntime_genai") is not None
pytestmark = pytest.mark.skipif(
    not HAS_ORTGENAI,
    reason="onnxruntime_genai is not installed here: its venv is built by ci/ortgenai-env.sh")

EOS = 1023  # the built model's EOS (convert.eos_id): the tiny preset's last token
# The tiny preset's greedy continuation of this prompt generates token 1023 at position 14
# (found by search over make_prompts([8], seed=...); seed 491).
EOS_PROMPT = (877, 178, 716, 856, 308, 158, 693, 666)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    from engines.adapters.ortgenai import make_engine

    eng = make_engine()
    yield eng
    assert not eng.has_work()


def test_factory_declares_what_the_library_has(engine: Engine) -> None:
    from engines.adapters.ortgenai import SUPPORTED_SAMPLING
    from engines.adapters.ortgenai.variants import ortgenai_batch1, ortgenai_max
    from engines.protocol import capabilities_of

    assert isinstance(engine, Engine) and isinstance(engine, Abortable)
    assert (engine.vocab_size, engine.max_model_len) == (1024, 512)
    assert capabilities_of(engine).max_concurrency == 4  # the library's default
    # seeds: no per-turn seed on the CPU; streamed_text: its stream loses text (report 28).
    declared = set(capabilities_of(engine).expected_failed_checks)
    assert declared == {"seeds", "streamed_text"}
    # guided only in the ortgenai_guided variant (report 29).
    assert capabilities_of(engine).supported_sampling == SUPPORTED_SAMPLING - {"guided"}
    assert "seed" not in SUPPORTED_SAMPLING
    assert not isinstance(engine, KVIntrospection)
    assert not hasattr(engine, "exercised")
    assert capabilities_of(ortgenai_batch1()).max_concurrency == 1
    assert capabilities_of(ortgenai_max()).max_concurrency == 16


def test_a_second_factory_call_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import engines.adapters.ortgenai.convert as convert
    from engines.adapters.common.checkpoints import checkpoint_dir, weights_digest

    first = convert.ortgenai_dir("tiny", 0)
    convert.ortgenai_dir.cache_clear()

    def refuse(*_: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(convert, "_build", refuse)
    assert convert.ortgenai_dir("tiny", 0) == first
    assert weights_digest(checkpoint_dir("tiny", seed=0, tokenizer=True)) in first.name
    # The builder writes EOS 0 for a checkpoint without one; the cached model names 1023.
    assert json.loads((first / "genai_config.json").read_text())["model"]["eos_token_id"] == EOS


def test_a_batch_of_six_matches_generate(engine: Engine) -> None:
    prompts = make_prompts([5, 40, 100, 7, 9, 11], seed=7)
    budgets = [8, 3, 12, 1, 6, 9]
    got = drain(engine, greedy(prompts, budgets))
    assert [got[r][0] for r in got] == [hf_generate(p, n) for p, n in zip(prompts, budgets,
                                                                         strict=True)]


def test_the_models_eos_does_not_stop_a_request(engine: Engine) -> None:
    expected = hf_generate(EOS_PROMPT, 30)
    assert EOS in expected[:20]  # else this test proves nothing
    for stops in ((), (5,)):  # no stop ids, and stop ids without the EOS
        request = Request(EOS_PROMPT, SamplingParams(max_tokens=30, stop_token_ids=stops))
        assert 5 not in expected
        assert drain(engine, [request])[request.request_id] == (expected, FinishReason.LENGTH)
    # The EOS as the last budgeted token: LENGTH, not a continuation past the budget.
    at = expected.index(EOS) + 1
    last = Request(EOS_PROMPT, SamplingParams(max_tokens=at))
    assert drain(engine, [last])[last.request_id] == (expected[:at], FinishReason.LENGTH)


def test_the_eos_as_a_stop_id_stops_with_the_token(engine: Engine) -> None:
    expected = hf_generate(EOS_PROMPT, 30)
    request = Request(EOS_PROMPT, SamplingParams(max_tokens=30, stop_token_ids=(EOS,)))
    got = drain(engine, [request])[request.request_id]
    assert got == (expected[: expected.index(EOS) + 1], FinishReason.STOP)


def test_logprobs_the_library_cannot_give_are_none(engine: Engine) -> None:
    (prompt,) = make_prompts([9], seed=4)
    engine.add_request(Request(prompt, SamplingParams(max_tokens=3, logprobs=2)))
    outputs = []
    while engine.has_work():
        outputs += engine.step()
    assert sum(len(o.token_ids) for o in outputs) == 3
    assert all(o.top_logprobs is None and o.logprobs is None for o in outputs)


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=6, temperature=1.0, top_k=1),
                                    SamplingParams(max_tokens=6, temperature=0.7, top_p=0.001)])
def test_filters_that_keep_one_token_sample_greedily(engine: Engine,
                                                     params: SamplingParams) -> None:
    # On the tiny preset's flat distributions, an unfiltered sample of 6 tokens equal to the
    # greedy ones is far below 1e-6: equality shows top_k / top_p reached the library.
    (prompt,) = make_prompts([7], seed=6)
    request = Request(prompt, params)
    assert drain(engine, [request])[request.request_id][0] == hf_generate(prompt, 6)


def test_unseeded_samples_differ_and_are_not_greedy(engine: Engine) -> None:
    (prompt,) = make_prompts([7], seed=6)
    requests = [Request(prompt, SamplingParams(max_tokens=5, temperature=1.0, top_k=-1))
                for _ in range(4)]
    got = drain(engine, requests)
    samples = {tuple(got[r.request_id][0]) for r in requests}
    assert len(samples) > 1 and tuple(hf_generate(prompt, 5)) not in samples


def test_more_requests_than_a_batch_all_finish(engine: Engine) -> None:
    # Static batching: the fifth request waits for the first batch of four to finish.
    prompts = make_prompts([3] * 5, seed=10)
    budgets = [10, 2, 2, 2, 3]
    requests = greedy(prompts, budgets)
    steps: list[set[object]] = []
    got = drain(engine, requests, on_step=lambda _, outs: steps.append(
        {o.request_id for o in outs}))
    assert steps[0] == {r.request_id for r in requests[:4]}
    assert requests[4].request_id not in set().union(*steps[:10])  # until the batch ends
    assert [got[r.request_id][0] for r in requests] == [
        hf_generate(p, n) for p, n in zip(prompts, budgets, strict=True)]


@pytest.mark.xfail(strict=True, reason="onnxruntime-genai 0.18.0: with top_k 0 (off) its CPU "
                   "sampler ignores top_p (docs/findings.md, report 12)")
def test_the_library_applies_top_p_with_top_k_off() -> None:
    import numpy as np
    import onnxruntime_genai as og

    from engines.adapters.ortgenai.convert import ortgenai_dir

    (prompt,) = make_prompts([7], seed=6)
    eng = og.Engine(og.Model(og.Config(str(ortgenai_dir("tiny", 0)))))
    buffer = eng.create_event_buffer(16)
    for _ in range(3):  # top_p 0.001 keeps the top token only: every sample is greedy
        req = eng.create_request()
        opts = og.TurnOptions(req)
        opts.set_max_generated_tokens(6)
        opts.set_do_sample(True)
        opts.set_temperature(0.7)
        opts.set_top_k(0)
        opts.set_top_p(0.001)
        req.begin_turn(np.array(prompt, dtype=np.int32), opts)
        tokens: list[int] = []
        while eng.has_pending_requests():
            tokens += [int(ev.token) for ev in eng.run(buffer) if ev.token is not None]
        assert tokens == hf_generate(prompt, 6)


@pytest.mark.xfail(strict=True, reason="onnxruntime-genai 0.18.0: the static scheduler batches "
                   "4 requests whatever engine.static_batching.max_batch_size says "
                   "(docs/findings.md, report 10)")
def test_batch1_runs_one_request_at_a_time() -> None:
    from engines.adapters.ortgenai.variants import ortgenai_batch1

    eng = ortgenai_batch1()
    requests = greedy(make_prompts([3, 4], seed=11), [3, 3])
    for r in requests:
        eng.add_request(r)
    first = eng.step()
    drain(eng, [])
    assert [o.request_id for o in first] == [requests[0].request_id]


def test_a_llama_checkpoint_builds_and_matches_generate() -> None:
    # The builder loads the architecture's tokenizer for Llama-family checkpoints and
    # resolves an EOS from it or the config: a preset's checkpoint carries the 1:1 tokenizer
    # (engines.adapters.common.tokenizer), and the builder reads a copy naming the EOS.
    from engines.adapters.ortgenai import make_engine

    eng = make_engine("tiny-llama-rope")
    prompts = make_prompts([5, 40, 90], seed=3)
    got = drain(eng, greedy(prompts, [30, 30, 30]))
    assert [got[r][0] for r in got] == [preset_generate("tiny-llama-rope", p, 30)
                                        for p in prompts]


def test_an_architecture_the_builder_lacks_is_a_declared_refusal() -> None:
    # onnxruntime-genai 0.18.0's builder has no Mixtral: the factory's refusal is a
    # ValueError (the matrix's "unsupported"), not a failed build.
    from engines.adapters.ortgenai import make_engine

    with pytest.raises(ValueError, match="does not support the architecture"):
        make_engine("tiny-moe")


# Gemma-2's sliding and full layers (report 23): prompts of different lengths in one batch,
# and prompts plus budgets past the 16-token window.
GEMMA = "tiny-gemma-mixed"
RAGGED = (3, 5, 40, 100)


@functools.lru_cache(maxsize=1)
def _gemma_eager() -> Any:
    # transformers' own forward, soft-capping included: this venv's transformers (5.19) gives
    # Gemma-2 `sdpa` by default, which drops the attention soft-cap silently; our own
    # instance, so that the shared model's attention is left as it is.
    from engines.models import build_preset

    model = build_preset(GEMMA)
    model.set_attn_implementation("eager")
    return model


def gemma_generate(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    import torch

    ids = torch.tensor([prompt])
    out = _gemma_eager().generate(ids, attention_mask=torch.ones_like(ids),
                                  max_new_tokens=max_tokens, do_sample=False)
    return [int(t) for t in out[0, len(prompt):]]


def test_a_gemma2_checkpoint_batches_prompts_of_different_lengths() -> None:
    # The builder's default cache on the sliding layers fails on such a batch (report 23):
    # the adapter builds full-length caches, and the window must still apply.
    from engines.adapters.common.checkpoints import checkpoint_dir
    from engines.adapters.ortgenai import make_engine
    from engines.adapters.ortgenai.convert import FULL_KV, builder_options, ortgenai_dir

    assert builder_options(checkpoint_dir(GEMMA, seed=0, tokenizer=True)) == FULL_KV
    for preset in ("tiny", "tiny-llama-rope", "tiny-mistral-swa"):  # no sliding layer_types
        assert builder_options(checkpoint_dir(preset, seed=0, tokenizer=True)) == {}
    built = ortgenai_dir(GEMMA, 0)
    decoder = json.loads((built / "genai_config.json").read_text())["model"]["decoder"]
    assert "sliding_window" not in decoder and "windowed_kv_cache=false" in built.name
    eng = make_engine(GEMMA)
    prompts = make_prompts(RAGGED, seed=12)
    got = drain(eng, greedy(prompts, [30] * len(prompts)))
    assert [got[r][0] for r in got] == [gemma_generate(p, 30) for p in prompts]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "onnxruntime-genai 0.18.0 (onnxruntime 1.31.1, 1.32.0): with the builder's default "
    "window-sized KV cache on Gemma-2's sliding layers, its Engine fails a batch whose prompts "
    "differ in length, ENGINE_EXECUTION_FAILURE (docs/findings.md, report 23)"))
def test_the_librarys_default_gemma2_build_batches_prompts_of_different_lengths() -> None:
    import numpy as np
    import onnxruntime_genai as og

    from engines.adapters.ortgenai.convert import built_dir

    model_dir = built_dir(GEMMA, 0, {})  # the builder's defaults
    config = json.loads((model_dir / "genai_config.json").read_text())
    if config["model"]["decoder"].get("sliding_window", {}).get("layers") != [0, 2]:
        pytest.fail("not the windowed build this test is about")  # not an AssertionError
    eng = og.Engine(og.Model(og.Config(str(model_dir))))
    buffer = eng.create_event_buffer(64)
    prompts = make_prompts((3, 4), seed=12)
    requests = []
    for prompt in prompts:
        req = eng.create_request()
        opts = og.TurnOptions(req)
        opts.set_max_generated_tokens(20)
        opts.set_do_sample(False)
        req.begin_turn(np.array(prompt, dtype=np.int32), opts)
        requests.append(req)
    got: dict[int, list[int | str]] = {id(r): [] for r in requests}
    while eng.has_pending_requests():
        for ev in eng.run(buffer):
            if ev.flags & og.EngineEventFlags.FAILED:
                got[id(ev.request)].append(ev.error_code.name)
            elif ev.token is not None:
                got[id(ev.request)].append(int(ev.token))
    assert [got[id(r)] for r in requests] == [gemma_generate(p, 20) for p in prompts]
