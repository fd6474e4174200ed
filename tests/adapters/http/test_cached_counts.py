"""The server's own count of each request's cached prompt tokens through the HTTP adapter
(StepOutput.cached_prompt_tokens), against the fake server's prefix cache: vLLM's trailing
usage message (the finishing output waits for it) and llama-server's per-message timings.
The isolation check judging from those counts (the fake server's planted tenant bugs caught,
the correct one passing): tests/testing/checks/test_isolation.py."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.adapters.http.vllm_lora import VLLMServerEngine  # noqa: E402
from engines.protocol import Request, SamplingParams, StepOutput, capabilities_of  # noqa: E402
from tests import fake_server  # noqa: E402
from tests.planted.server_bugs import TENANT_ADAPTERS  # noqa: E402

PROMPT = tuple(range(1, 12))  # 11 tokens: two 4-token blocks cacheable, the last computed


def _serve(eng: HTTPEngine, requests: list[Request]) -> dict[Hashable, list[StepOutput]]:
    """One request at a time, each drained: its outputs."""
    out: dict[Hashable, list[StepOutput]] = {}
    for r in requests:
        eng.add_request(r)
        while eng.has_work():
            for o in eng.step():
                out.setdefault(o.request_id, []).append(o)
    return out


def _counts(outs: dict[Hashable, list[StepOutput]]) -> dict[Hashable, list[int]]:
    return {rid: [o.cached_prompt_tokens for o in seq if o.cached_prompt_tokens is not None]
            for rid, seq in outs.items()}


@pytest.mark.parametrize("dialect", ["openai", "llama-cache-prompt"])
def test_the_servers_count_comes_once_per_request(dialect: str) -> None:
    state = fake_server.State(prefix_block=4, loras=dict(TENANT_ADAPTERS))
    with fake_server.serving(state) as (url, _):
        if dialect == "openai":
            eng: HTTPEngine = VLLMServerEngine(url, loras=TENANT_ADAPTERS,
                                               vocab_size=fake_server.VOCAB)
        else:
            eng = HTTPEngine(url, vocab_size=fake_server.VOCAB, dialect=dialect)
        assert "cached_prompt_tokens" in capabilities_of(eng).output_fields
        p = SamplingParams(max_tokens=3)
        reqs = [Request(PROMPT, p, request_id="a"), Request(PROMPT, p, request_id="b")]
        if dialect == "openai":
            reqs += [Request(PROMPT, p, request_id="salted", cache_salt="s"),
                     Request(PROMPT, p, request_id="adapter", lora="fake-lora-a")]
        outs = _serve(eng, reqs)
        want: dict[Hashable, list[int]] = {"a": [0], "b": [8], "salted": [0], "adapter": [0]}
        assert _counts(outs) == {rid: want[rid] for rid in outs}
        # Every token arrived, the finish last (the openai finishing output waited for the
        # trailing usage message, and carries the count).
        assert all(len([t for o in seq for t in o.token_ids]) == 3 and seq[-1].finished
                   for seq in outs.values())
        assert not eng.has_work()


def test_a_server_that_sends_no_count_leaves_it_none() -> None:
    with fake_server.serving(fake_server.State()) as (url, state):  # no prefix cache
        eng = HTTPEngine(url, vocab_size=fake_server.VOCAB)
        outs = _serve(eng, [Request(PROMPT, SamplingParams(max_tokens=2), request_id="a")])
        assert _counts(outs) == {"a": []} and outs["a"][-1].finished
        assert state.bodies[0]["stream_options"] == {"include_usage": True}
