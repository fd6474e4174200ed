"""The HTTP adapter's tenant fields for vLLM's server (engines.adapters.http.vllm_lora), against
the fake server (tests/fake_server.py): a request's adapter travels as its `model` and its
salt as `cache_salt`, a base request carries neither, an adapter the server does not serve is
refused by name before anything is sent, and adapters the server does not list are an error
at construction. The real server: tests/adapters/http/test_vllm_loras.py."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import ServerError  # noqa: E402
from engines.adapters.http.vllm_lora import VLLMServerEngine  # noqa: E402
from engines.protocol import (  # noqa: E402
    InvalidRequest,
    LoRAManagement,
    Request,
    SamplingParams,
    capabilities_of,
)
from tests import fake_server  # noqa: E402
from tests.helpers import run_tokens  # noqa: E402

ADAPTERS = {"a": "/adapters/a", "b": "/adapters/b"}


def test_adapter_and_salt_travel_in_the_body() -> None:
    with fake_server.serving(fake_server.State(loras=dict(ADAPTERS))) as (url, state):
        eng = VLLMServerEngine(url, loras=ADAPTERS, vocab_size=fake_server.VOCAB)
        assert eng.loras == ADAPTERS and not isinstance(eng, LoRAManagement)
        assert {"lora", "cache_salt"} <= capabilities_of(eng).supported_sampling
        run_tokens(eng, [Request((9,), SamplingParams(max_tokens=1), request_id="t",
                                 lora="b", cache_salt="tenant-b")])
        run_tokens(eng, [Request((9,), SamplingParams(max_tokens=1), request_id="base")])
        tenant, base = state.bodies
        assert (tenant["model"], tenant["cache_salt"]) == ("b", "tenant-b")
        assert base["model"] == "fake" and "cache_salt" not in base
        with pytest.raises(InvalidRequest, match="^lora: 'c' is not an adapter"):
            eng.add_request(Request((9,), SamplingParams(max_tokens=1), lora="c"))
        assert len(state.bodies) == 2 and not eng.has_work()


def test_adapters_the_server_does_not_list_are_an_error() -> None:
    with fake_server.serving(fake_server.State(loras={"a": "/adapters/a"})) as (url, _):
        with pytest.raises(ServerError, match="serves the adapters"):
            VLLMServerEngine(url, loras=ADAPTERS, vocab_size=fake_server.VOCAB)
