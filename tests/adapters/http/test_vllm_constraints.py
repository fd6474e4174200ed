"""The HTTP adapter's vLLM dialect (engines.adapters.http.dialects.OpenAICompletions): wave 4's
constraints that OpenAI's body carries as token ids reach the server as vLLM reads them, and
the rest are refused by name (against the fake server, tests/fake_server.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.protocol import InvalidRequest, Request, SamplingParams  # noqa: E402
from tests import fake_server  # noqa: E402


def test_allowed_ids_and_logit_bias_reach_the_server() -> None:
    with fake_server.serving() as (url, state):
        eng = HTTPEngine(url, vocab_size=fake_server.VOCAB)
        params = SamplingParams(max_tokens=2, allowed_token_ids=(3, 4),
                                logit_bias=((4, 2.5), (7, -100.0)))
        eng.add_request(Request((9,), params))
        while eng.has_work():
            eng.step()
        (body,) = state.bodies
        assert body["allowed_token_ids"] == [3, 4]
        assert body["logit_bias"] == {"4": 2.5, "7": -100.0}
        plain = HTTPEngine(url, vocab_size=fake_server.VOCAB)
        plain.add_request(Request((9,), SamplingParams(max_tokens=1)))
        while plain.has_work():
            plain.step()
        assert "allowed_token_ids" not in state.bodies[-1]
        assert "logit_bias" not in state.bodies[-1]


@pytest.mark.parametrize("field", [{"bad_words": ((1, 2),)}, {"n": 2}, {"prompt_logprobs": 1},
                                   {"stop": ("a",)}])
def test_what_the_dialect_cannot_carry_is_refused_by_name(field: dict[str, object]) -> None:
    with fake_server.serving() as (url, state):
        eng = HTTPEngine(url, vocab_size=fake_server.VOCAB)
        (name,) = field
        with pytest.raises(InvalidRequest, match=f"^{name}: "):
            eng.add_request(Request((9,), SamplingParams(max_tokens=1, **field)))  # type: ignore[arg-type]
        assert not state.bodies
