"""The onnxruntime-genai adapter's guided decoding and text against the sequential reference
(llguidance on the same weights and tokenizer): each guided kind, batched with unguided
requests, gives the reference's tokens, finish and text; a grammar that can go no further
stops without an EOS, one the model ends with EOS keeps it; the library's stream is the text
(where it keeps every character). Stop strings, n and beams are refused by name.

Skipped where onnxruntime_genai is not importable: it lives in its own venv, built by
`bash ci/ortgenai-env.sh` (run these with .venv-ortgenai/bin/python -m pytest).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Hashable, Iterator

import pytest

from engines.protocol import (
    Engine,
    FinishReason,
    Guided,
    InvalidRequest,
    Request,
    SamplingParams,
    capabilities_of,
)
from tests.helpers import make_prompts

HAS_OG = importlib.util.find_spec("onnxruntime_genai") is not None
pytestmark = pytest.mark.skipif(
    not HAS_OG, reason="onnxruntime_genai is not installed here: its venv is built by "
                       "ci/ortgenai-env.sh")

Result = dict[Hashable, tuple[tuple[int, ...], FinishReason | None, str]]
GUIDED = [Guided("regex", "(yes|no|maybe)"), Guided("regex", "[a-z]{3,6}"),
          Guided("json_schema", json.dumps({"type": "object", "required": ["a"],
                                            "properties": {"a": {"type": "integer"}}})),
          Guided("choice", ("ab", "cd")), Guided("grammar", 'root ::= "ab" | "cd" x\nx ::= [0-9]+'),
          None, None]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    from engines.adapters.ortgenai.variants import ortgenai_guided

    eng = ortgenai_guided()
    yield eng
    assert not eng.has_work()


def _run(engine: Engine, requests: list[Request]) -> Result:
    out: Result = {}
    for r in requests:
        engine.add_request(r)
    for _ in range(1000):
        if not engine.has_work():
            return out
        for o in engine.step():
            tokens, _, text = out.get(o.request_id, ((), None, ""))
            out[o.request_id] = (tokens + o.token_ids, o.finish_reason, text + (o.text or ""))
    raise AssertionError("the engine never drained")


def _requests(seed: int) -> list[Request]:
    prompts = make_prompts([4, 7, 3, 5, 6, 2, 9], seed=seed)
    return [Request(p, SamplingParams(max_tokens=12, guided=g), request_id=i)
            for i, (p, g) in enumerate(zip(prompts, GUIDED, strict=True))]


@pytest.mark.parametrize("seed", [7, 8])
def test_guided_batch_equals_the_reference(engine: Engine, seed: int) -> None:
    from engines.sequential import SequentialEngine
    from engines.testing.text import decode, tokenizer

    directory = capabilities_of(engine).tokenizer
    assert directory is not None
    tok = tokenizer(directory)
    got, want = _run(engine, _requests(seed)), _run(SequentialEngine(), _requests(seed))
    for rid in want:
        assert got[rid][:2] == want[rid][:2], (rid, got[rid], want[rid])
    guided_stops = [rid for rid, (_, f, _) in got.items()
                    if GUIDED[int(str(rid))] is not None and f == FinishReason.STOP]
    assert guided_stops, "no guided request reached its grammar's end: nothing was judged"
    for rid, (tokens, _, text) in got.items():
        full = decode(tok, tokens)
        # The library's stream: equal to the decode unless it met report 28.
        assert text == full or "\ufffd" in full, (rid, text, full)


def test_a_grammar_that_can_go_no_further_stops_without_eos(engine: Engine) -> None:
    from engines.adapters.ortgenai.convert import eos_id

    r = Request(make_prompts([4], seed=7)[0],
                SamplingParams(max_tokens=12, guided=Guided("choice", ("ab", "cd"))))
    tokens, finish, text = _run(engine, [r])[r.request_id]
    assert finish == FinishReason.STOP and text in ("ab", "cd")
    assert eos_id(engine.vocab_size) not in tokens


def test_the_default_factory_leaves_guided_out() -> None:
    from engines.adapters.ortgenai import make_engine
    from engines.adapters.ortgenai.adapter import GUIDANCE_LOSES_BYTES

    assert "report 29" in GUIDANCE_LOSES_BYTES
    eng = make_engine()
    declared = capabilities_of(eng)
    assert "guided" not in declared.supported_sampling and declared.tokenizer is not None
    with pytest.raises(InvalidRequest, match="guided"):
        eng.add_request(Request((1, 2), SamplingParams(guided=Guided("regex", "a"))))


def test_a_grammar_needing_a_partial_character_token_fails_the_turn(engine: Engine) -> None:
    """Report 29, as it is on 0.18.0: choices that share only a character's first byte.
    A fresh engine: the failure leaves the library's Engine unhealthy."""
    from engines.adapters.ortgenai.adapter import TurnFailed
    from engines.adapters.ortgenai.variants import ortgenai_guided

    eng = ortgenai_guided()
    with pytest.raises(TurnFailed, match="ENGINE_EXECUTION_FAILURE"):
        _run(eng, [Request((0,), SamplingParams(max_tokens=2,
                                                guided=Guided("choice", ("é", "ü"))))])


@pytest.mark.parametrize("params", [SamplingParams(stop=("a",)), SamplingParams(n=2),
                                    SamplingParams(beam_width=2)])
def test_what_the_library_lacks_is_refused_by_name(engine: Engine,
                                                   params: SamplingParams) -> None:
    field = next(f for f in ("stop", "n", "beam_width") if getattr(params, f) != getattr(
        SamplingParams(), f))
    with pytest.raises(InvalidRequest, match=field):
        engine.add_request(Request((1, 2, 3), params))
    assert not engine.has_work()


def test_a_bad_grammar_is_refused_naming_the_spec(engine: Engine) -> None:
    with pytest.raises(InvalidRequest, match="guided.spec"):
        engine.add_request(Request((1, 2), SamplingParams(guided=Guided("regex", "(unclosed"))))
    assert not engine.has_work()
