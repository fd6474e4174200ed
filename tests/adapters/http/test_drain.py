"""The drain check on a live server (LoadIntrospection from /metrics): against the fake
server, a correct one passes, and one that leaves a finished request counted as running or
its KV usage behind fails the check, with the server's count in the message."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.adapters.http.dialects import vllm_counters, vllm_load  # noqa: E402
from engines.protocol import (  # noqa: E402
    Load,
    LoadIntrospection,
    Request,
    SamplingParams,
    capabilities_of,
)
from engines.testing.checks import applicability, check_named  # noqa: E402
from engines.testing.judging import Violation  # noqa: E402
from engines.testing.limits import EngineLimits  # noqa: E402
from engines.testing.recorder import load_left, run_workload  # noqa: E402
from engines.testing.workload import Abort, Workload  # noqa: E402
from tests import fake_server  # noqa: E402
from tests.helpers import JUDGE  # noqa: E402
from tests.planted.harness import hunt, pinned  # noqa: E402
from tests.planted.server_bugs import SERVER_CONTROL, SERVER_PLANTED, PlantedServer  # noqa: E402

# The registry's check, called as the suite calls it: check(trace, judge).
check_drain = check_named("drain")


@pytest.fixture
def served() -> Iterator[fake_server.State]:
    yield fake_server.State()


def _over(leak: str) -> tuple[HTTPEngine, fake_server.State, object]:
    server, state = fake_server.serve(state=fake_server.State(leak=leak))
    eng = HTTPEngine(f"http://127.0.0.1:{server.server_address[1]}",
                     vocab_size=fake_server.VOCAB, load_settle=0.5)
    return eng, state, server


def _workload() -> Workload:
    requests = tuple(Request((i + 1, 2, 3), SamplingParams(max_tokens=4), request_id=f"r{i}")
                     for i in range(3))
    long = Request((9, 9), SamplingParams(max_tokens=30), request_id="aborted")
    return Workload((*requests, long), (0, 0, 1, 0), (Abort(2, "aborted"),))


@pytest.mark.parametrize("leak, left", [("", None), ("running", "3 request(s) running"),
                                        ("kv", "KV usage 0.03")])
def test_the_drain_check_reads_the_servers_count(leak: str, left: str | None) -> None:
    eng, state, server = _over(leak)
    try:
        assert isinstance(eng, LoadIntrospection)
        assert EngineLimits.of(eng).load
        trace = run_workload(eng, _workload())
        assert trace.load_before == Load(0, 0, 0.0, f"{eng.url}/metrics")
        assert trace.finish_reason("aborted") is not None
        if left is None:  # the correct server comes to rest: the check passes
            check_drain(trace, JUDGE)
            assert trace.load_after_drain is not None
            assert load_left(trace.load_before, trace.load_after_drain) is None
        else:  # the planted leak: the check fails, saying what the server still counts
            with pytest.raises(Violation, match="drain: .*" + re.escape(left)):
                check_drain(trace, JUDGE)
            assert trace.load_waited_s >= 0.5  # it waited the settle time first
    finally:
        eng.close()
        server.shutdown()  # type: ignore[attr-defined]
        server.server_close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("bug", SERVER_PLANTED, ids=lambda b: b.__name__)
def test_the_suite_catches_a_leaking_server(bug: PlantedServer) -> None:
    try:
        caught = hunt(bug, settings=pinned(10, shrink=False))
    finally:
        bug.close()
    assert caught is not None and caught.prop == "drain", str(caught)


def test_the_suite_passes_a_correct_server() -> None:
    try:
        assert hunt(SERVER_CONTROL, settings=pinned(10, shrink=False)) is None
    finally:
        SERVER_CONTROL.close()


def test_a_server_without_load_metrics_has_no_load_introspection() -> None:
    # The fake's /metrics has vLLM's gauges only, which the llama dialect does not read (it
    # reads llama-server's): the adapter lacks the protocol, the check skips and says why.
    server, _ = fake_server.serve()
    try:
        eng = HTTPEngine(f"http://127.0.0.1:{server.server_address[1]}",
                         vocab_size=fake_server.VOCAB, dialect="llama")
        assert not isinstance(eng, LoadIntrospection)
        fate = applicability(EngineLimits.of(eng), {})["drain"]
        assert fate.status == "skip" and "LoadIntrospection" in fate.reason
        eng.close()
    finally:
        server.shutdown()
        server.server_close()


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


def test_a_server_known_to_crash_on_seeds_refuses_them_and_declares_it() -> None:
    server, state = fake_server.serve()
    try:
        eng = HTTPEngine(f"http://127.0.0.1:{server.server_address[1]}",
                         vocab_size=fake_server.VOCAB, refuse_seeded="known crash")
        assert capabilities_of(eng).expected_failed_checks == {"seeds": "known crash"}
        with pytest.raises(ValueError, match="seed: 7 is not supported .*known crash"):
            eng.add_request(Request((1,), SamplingParams(temperature=1.0, seed=7)))
        assert not eng.has_work() and state.bodies == []  # refused before it was sent
        eng.add_request(Request((1,), SamplingParams(temperature=0.0, seed=7)))  # greedy: fine
        eng.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("before, after, left", [
    (Load(0, 0, 0.0), Load(0, 0, 0.0), None),
    (Load(0, 0, 0.1), Load(0, 0, 0.1), None),  # a baseline above zero, back to it
    (Load(0, 0, 0.1), Load(0, 0, 0.0), None),  # below it (a cache evicted): no leak
    (Load(0, 0, None), Load(0, 0, 0.2), None),  # no baseline: KV not judged
    (Load(0, 0, 0.0), Load(1, 0, 0.0), "1 request(s) running"),
    (Load(0, 0, 0.0), Load(0, 2, 0.0), "2 request(s) waiting"),
    (Load(0, 0, 0.1), Load(0, 0, 0.2), "KV usage 0.2, above its 0.1"),
])
def test_load_left(before: Load, after: Load, left: str | None) -> None:
    found = load_left(before, after)
    assert found == left if left is None else (found is not None and left in found)
