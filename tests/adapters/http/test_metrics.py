"""Reading a vLLM server's /metrics text (engines.adapters.http.dialects): its gauges become a
Load (what the drain check reads), its counters what the server exercised."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http.dialects import vllm_counters, vllm_load  # noqa: E402
from engines.protocol import Load  # noqa: E402


def test_vllm_metrics_text_becomes_a_load() -> None:
    text = ("# HELP vllm:num_requests_running Number of requests in model execution.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            'vllm:num_requests_running{engine="1",model_name="m"} 1.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 4.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75\n')
    assert vllm_load(text, "s") == Load(3, 4, 0.5, "s")  # counts summed, usage averaged
    assert vllm_load("sglang:num_running_reqs 1.0\n", "s") is None  # not vLLM's: not read
    no_kv = 'vllm:num_requests_running 0.0\nvllm:num_requests_waiting 0.0\n'
    assert vllm_load(no_kv, "s") == Load(0, 0, None, "s")


def test_vllm_counters_become_what_the_server_exercised() -> None:
    text = ('vllm:num_preemptions_total{engine="0",model_name="m"} 3.0\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0\n')
    assert vllm_counters(text) == {"preemptions": 3, "prefix_cache_hit_tokens": 64}
    assert vllm_counters("vllm:num_requests_running 0.0\n") is None  # absent, never zero
