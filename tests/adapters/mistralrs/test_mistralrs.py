"""The mistral.rs adapter against transformers' generate and the protocol's translations, and
the offline export it loads (engines.adapters.common.checkpoints.export_preset, the
byte-level tokenizer of engines.adapters.mistralrs.convert).

The engine's tests are skipped where mistralrs is not importable: it lives in its own venv,
built by `bash ci/mistralrs-env.sh` (run these with .venv-mistralrs/bin/python -m pytest).
The export's tests need only transformers and tokenizers, and run everywhere. Nothing from
mistralrs is imported at the top of this module.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import pytest

from engines.protocol import (
    Abortable,
    Engine,
    FinishReason,
    InvalidRequest,
    Request,
    SamplingParams,
    StepOutput,
    capabilities_of,
)
from tests.helpers import (
    alone,
    assert_abort_frees_the_id,
    assert_generate_tokens_with_mid_run_arrivals,
    assert_top_logprobs_match_the_reference,
    drain,
    hf_generate,
    make_prompts,
)

HAS_MISTRALRS = importlib.util.find_spec("mistralrs") is not None
needs_mistralrs = pytest.mark.skipif(
    not HAS_MISTRALRS,
    reason="mistralrs is not installed here: its venv is built by ci/mistralrs-env.sh")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    from engines.adapters.mistralrs import make_engine

    eng = make_engine()
    yield eng
    assert not eng.has_work()


# -- the export (no mistralrs needed) -----------------------------------------------------------
@needs_mistralrs  # the convert module's package imports mistralrs
def test_every_id_round_trips_through_the_byte_level_tokenizer(tmp_path: Any) -> None:
    from tokenizers import Tokenizer

    from engines.adapters.mistralrs.convert import encode, token_of, write_tokenizer

    write_tokenizer(tmp_path, 1024)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    ids = list(range(1024))
    assert tok.encode(encode(ids), add_special_tokens=False).ids == ids
    # Decoded one at a time, as a stream delivers them, each id reads back as itself.
    assert [token_of(tok.decode([i])) for i in ids] == ids
    assert token_of(" t7") == token_of("\u0120t7") == 7
    with pytest.raises(ValueError, match="token: 'x7'"):
        token_of("x7")


def test_the_legacy_config_adds_the_older_rope_fields() -> None:
    from engines.adapters.common.checkpoints import legacy_config

    plain = legacy_config({"rope_parameters": {"rope_theta": 1e4, "rope_type": "default"}})
    assert plain["rope_theta"] == 1e4 and plain["rope_scaling"] is None
    long = legacy_config({"rope_parameters": {"rope_theta": 1e4, "rope_type": "longrope",
                                              "short_factor": [1.0], "long_factor": [2.0],
                                              "original_max_position_embeddings": 64}})
    assert long["rope_scaling"]["type"] == long["rope_scaling"]["rope_type"] == "longrope"
    assert "rope_theta" not in long["rope_scaling"]
    assert long["original_max_position_embeddings"] == 64
    assert legacy_config({"rope_theta": 5.0, "rope_parameters": {"rope_theta": 1e4}}
                         )["rope_theta"] == 5.0  # a field present is kept


def test_export_preset_keys_its_directory_by_every_option() -> None:
    from safetensors import safe_open

    from engines.adapters.common.checkpoints import checkpoint_dir, export_preset

    plain = export_preset("tiny", seed=0)
    assert plain == checkpoint_dir("tiny", seed=0)  # the checkpoint every adapter uses
    legacy = export_preset("tiny", seed=0, legacy_config_fields=True, tokenizer=True)
    half = export_preset("tiny", seed=0, dtype="bfloat16")
    assert len({plain, legacy, half}) == 3
    config = json.loads((legacy / "config.json").read_text())
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"]
    assert "rope_theta" not in json.loads((plain / "config.json").read_text())
    assert (legacy / "tokenizer.json").is_file() and not (plain / "tokenizer.json").exists()
    with safe_open(str(half / "model.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.bfloat16"}
    with pytest.raises(ValueError, match="dtype: unknown 'int3'"):
        export_preset("tiny", dtype="int3")


# -- the engine ---------------------------------------------------------------------------------
@needs_mistralrs
def test_factory_declares_what_the_library_has(engine: Engine) -> None:
    from engines.adapters.mistralrs.variants import mistralrs_no_prefix_cache, mistralrs_one_seq
    from engines.protocol import KVIntrospection, SlotIntrospection

    assert isinstance(engine, Engine) and isinstance(engine, Abortable)
    assert (engine.vocab_size, engine.max_model_len) == (1024, 512)
    assert capabilities_of(engine).max_concurrency == 32
    assert set(capabilities_of(engine).expected_failed_checks) == {"seeds"}
    assert capabilities_of(engine).logprobs_of == "processed"
    supported = capabilities_of(engine).supported_sampling
    assert not {"seed", "min_tokens", "repetition_penalty"} & supported
    assert "repetition_penalty" in capabilities_of(mistralrs_no_prefix_cache()).supported_sampling
    assert capabilities_of(mistralrs_one_seq()).max_concurrency == 1
    assert not isinstance(engine, SlotIntrospection | KVIntrospection)
    assert not hasattr(engine, "exercised")


@needs_mistralrs
def test_a_second_factory_call_converts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import engines.adapters.mistralrs.convert as convert
    from engines.adapters.common.checkpoints import checkpoint_dir, weights_digest

    first = convert.mistralrs_dir("tiny", 0)
    convert.mistralrs_dir.cache_clear()

    def refuse(*_: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(convert, "_convert", refuse)
    assert convert.mistralrs_dir("tiny", 0) == first
    assert weights_digest(checkpoint_dir("tiny", seed=0)) in first.name
    assert first.name.endswith(f"-{convert.LAYOUT}")


@needs_mistralrs
def test_greedy_tokens_are_generates_with_mid_run_arrivals(engine: Engine) -> None:
    assert_generate_tokens_with_mid_run_arrivals(engine, [5, 40, 1, 17])


@needs_mistralrs
def test_top_logprobs_are_the_models_with_the_f32_kv_cache(engine: Engine) -> None:
    # The library's CPU default (an f16 KV cache) was up to 1.1e-2 off: the adapter sets F32.
    (prompt,) = make_prompts([30], seed=3)
    assert_top_logprobs_match_the_reference(engine, prompt, SamplingParams(max_tokens=6,
                                                                           logprobs=3))


@needs_mistralrs
def test_abort_frees_the_id(engine: Engine) -> None:
    assert_abort_frees_the_id(engine)


@needs_mistralrs
def test_a_stop_id_ends_the_request_with_it_kept(engine: Engine) -> None:
    (prompt,) = make_prompts([12], seed=4)
    want = hf_generate(prompt, 8)
    stop = want[3]
    cut = want[: want.index(stop) + 1]
    got = drain(engine, [Request(prompt, SamplingParams(max_tokens=8, stop_token_ids=(stop,)),
                                 request_id="s")])
    assert got["s"] == (cut, FinishReason.STOP)


@needs_mistralrs
def test_a_later_event_in_the_same_step_never_overwrites_a_stop(engine: Engine) -> None:
    """Bite for the finish bookkeeping: chunks queued after the stop id (the library keeps
    generating until its stream is dropped) and its own "length" end, all drained in one
    step, leave the request ended at the stop id with STOP."""
    from engines.adapters.mistralrs.adapter import MistralRsEngine, _Stream

    eng: MistralRsEngine = engine  # type: ignore[assignment]
    request = Request((5, 6), SamplingParams(max_tokens=4, stop_token_ids=(9,)), request_id="x")
    key = eng._book.add(request, vocab_size=1024, max_model_len=512)
    live = eng._book.get(key)
    assert live is not None
    eng._streams[key] = stream = _Stream(live)  # no thread: the events are ours
    for tokens in ([3], [9], [4]):
        eng._events.put((key, "chunk", (tokens, [], None)))
    eng._events.put((key, "chunk", ([7], [], "length")))
    assert eng.step() == [StepOutput("x", (3, 9), FinishReason.STOP)]
    assert stream.cancelled.is_set() and not eng.has_work() and key not in eng._streams


@needs_mistralrs
def test_bad_input_is_refused_by_name_and_nothing_is_lost(engine: Engine) -> None:
    from engines.adapters.mistralrs.variants import mistralrs_no_prefix_cache

    (prompt,) = make_prompts([6], seed=6)
    engine.add_request(Request(prompt, SamplingParams(max_tokens=3), request_id="good"))
    cases = [
        (Request((1024,), request_id="b1"), r"prompt_token_ids\[0\]: 1024 is outside"),
        (Request(prompt, SamplingParams(temperature=1.0, seed=3), request_id="b2"), "seed: 3"),
        (Request(prompt, SamplingParams(min_tokens=2), request_id="b3"), "min_tokens: 2"),
        # The prefix cache's penalty misses reused prompt tokens (report 25): refused there.
        (Request(prompt, SamplingParams(repetition_penalty=1.5), request_id="b4"),
         "repetition_penalty: 1.5"),
        (Request(prompt, request_id="good"), "request_id: 'good' is already in flight"),
    ]
    for request, match in cases:
        with pytest.raises(InvalidRequest, match=match):
            engine.add_request(request)
    got = drain(engine, [])
    assert got["good"] == (hf_generate(prompt, 3), FinishReason.LENGTH)
    assert set(got) == {"good"}
    # Served where the cache is off, with the reference's tokens (no earlier request here).
    request = Request(prompt, SamplingParams(max_tokens=3, repetition_penalty=1.5))
    assert drain(mistralrs_no_prefix_cache(), [request])[request.request_id][0] == \
        alone([request])[request.request_id]


@needs_mistralrs
def test_a_prompt_the_library_reads_otherwise_is_refused(engine: Engine,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from engines.adapters.mistralrs.adapter import MistralRsEngine

    eng: MistralRsEngine = engine  # type: ignore[assignment]

    class Misreads:
        def tokenize_text(self, text: str, *_: object) -> list[int]:
            return [1, 2]

    monkeypatch.setattr(eng, "_runner", Misreads())
    with pytest.raises(InvalidRequest, match=r"prompt_token_ids: the library's tokenizer reads "
                                             r"the prompt's text as \[1, 2\]"):
        eng.add_request(Request((3, 4), request_id="m"))
    assert not eng.has_work()  # the refused id is not in flight
    monkeypatch.undo()
    assert drain(eng, [Request((3, 4), SamplingParams(max_tokens=2), request_id="m")])["m"] == (
        hf_generate((3, 4), 2), FinishReason.LENGTH)


@needs_mistralrs
def test_a_library_error_is_raised_on_the_callers_thread(engine: Engine) -> None:
    from engines.adapters.mistralrs.adapter import MistralRsEngine, _Stream

    eng: MistralRsEngine = engine  # type: ignore[assignment]
    key = eng._book.add(Request((5,), request_id="e"), vocab_size=1024, max_model_len=512)
    live = eng._book.get(key)
    assert live is not None
    eng._streams[key] = _Stream(live)
    eng._events.put((key, "error", ValueError("boom")))
    with pytest.raises(RuntimeError, match="mistral.rs failed on request 'e': boom"):
        eng.step()
    eng.abort_request("e")  # the caller's clean-up: the id is freed
    assert [o.finish_reason for o in eng.step()] == [FinishReason.ABORT]


@needs_mistralrs
def test_a_sliding_window_preset_is_refused_with_the_report() -> None:
    from engines.adapters.mistralrs import mistralrs_engine

    with pytest.raises(ValueError, match=r"report 24\).*sliding_window=16, refused"):
        mistralrs_engine("tiny-mistral-swa")
