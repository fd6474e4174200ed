"""The llama dialect's wave-4 mappings, body by body (no server): logit_bias as llama.cpp's
own pairs, allowed_token_ids as `false` (-inf) on every other id, a request's LoRA adapter
at scale 1 beside the others at 0 (a base request sends none), and the speculative
counters read from /metrics only for a server launched to speculate."""

from __future__ import annotations

import pytest

from engines.adapters.http.dialects import LlamaServer, llama_counters
from engines.protocol import Request, SamplingParams

METRICS = ("# TYPE llamacpp:prompt_tokens_cached_total counter\n"
           "llamacpp:prompt_tokens_cached_total 7\n"
           "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
           "llamacpp:spec_decode_num_draft_tokens_total 40\n"
           "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
           "llamacpp:spec_decode_num_accepted_tokens_total 25\n")


def test_logit_bias_and_allowed_ids_are_llama_bias_pairs() -> None:
    d = LlamaServer(vocab_size=6)
    assert {"logit_bias", "allowed_token_ids"} <= d.supported_sampling
    assert "bad_words" not in d.supported_sampling and "guided" not in d.supported_sampling
    body = d.body(Request((1, 2), SamplingParams(logit_bias=((3, 2.5), (4, -100.0)))), None)
    assert body["logit_bias"] == [[3, 2.5], [4, -100.0]]
    body = d.body(Request((1,), SamplingParams(allowed_token_ids=(0, 4),
                                               logit_bias=((4, 1.0),))), None)
    # The request's bias, then -inf (JSON false) on every id not allowed.
    assert body["logit_bias"] == [[4, 1.0], [1, False], [2, False], [3, False], [5, False]]
    assert "logit_bias" not in d.body(Request((1,), SamplingParams()), None)
    # Without the vocabulary size the dialect cannot list the other ids: not declared.
    assert "allowed_token_ids" not in LlamaServer().supported_sampling
    with pytest.raises(ValueError, match="vocab_size"):
        LlamaServer().body(Request((1,), SamplingParams(allowed_token_ids=(1,))), None)


def test_a_request_names_its_adapter_and_a_base_request_sends_none() -> None:
    d = LlamaServer(loras={"a": 0, "b": 1, "c": 2})
    assert "lora" in d.supported_sampling
    assert "lora" not in LlamaServer().supported_sampling and "cache_salt" not in \
        d.supported_sampling
    body = d.body(Request((1,), lora="b"), None)
    assert body["lora"] == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 1.0},
                            {"id": 2, "scale": 0.0}]
    assert "lora" not in d.body(Request((1,)), None)


def test_spec_counters_only_where_the_server_speculates() -> None:
    assert llama_counters(METRICS) == {"prefix_cache_hit_tokens": 7}
    assert llama_counters(METRICS, speculative=True) == {
        "prefix_cache_hit_tokens": 7, "spec_draft_tokens": 40, "spec_accepted_tokens": 25}
    d = LlamaServer(speculative=True, name="llama-draft")
    assert d.name == "llama-draft"
    assert d.counters(lambda path: METRICS) == llama_counters(METRICS, speculative=True)


def test_n_is_llama_servers_n_cmpl_where_declared() -> None:
    d = LlamaServer(children=True)
    assert "n" in d.supported_sampling and "n" not in LlamaServer().supported_sampling
    assert d.body(Request((1,), SamplingParams(n=3)), None)["n_cmpl"] == 3
    assert "n_cmpl" not in d.body(Request((1,), SamplingParams()), None)


def test_explicit_base_lists_every_adapter_at_zero() -> None:
    d = LlamaServer(loras={"a": 0, "b": 1}, explicit_base=True)
    assert d.body(Request((1,)), None)["lora"] == [{"id": 0, "scale": 0.0},
                                                   {"id": 1, "scale": 0.0}]
    assert "lora" not in LlamaServer(explicit_base=True).body(Request((1,)), None)
