"""drain: the check on a live server (LoadIntrospection from /metrics): against the fake
server, a correct one passes, and one that leaves a finished request counted as running or
its KV usage behind (its planted bugs, tests/planted/server_bugs.py) fails the check, with
the server's count in the message; what a load left behind is."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.protocol import Load, LoadIntrospection, Request, SamplingParams  # noqa: E402
from engines.testing.checks import applicability, check_named  # noqa: E402
from engines.testing.judging import Violation  # noqa: E402
from engines.testing.limits import EngineLimits  # noqa: E402
from engines.testing.recorder import load_left, run_workload  # noqa: E402
from engines.testing.workload import Abort, Workload  # noqa: E402
from tests import fake_server  # noqa: E402
from tests.helpers import JUDGE  # noqa: E402
from tests.planted import expect  # noqa: E402
from tests.planted.catalog import ALL_CONTROLS, name_of, planted  # noqa: E402
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


@pytest.mark.parametrize("bug", planted("drain", SERVER_PLANTED), ids=name_of)
def test_the_suite_catches_a_leaking_server(bug: PlantedServer) -> None:
    try:
        caught = hunt(bug, settings=pinned(10, shrink=False))
    finally:
        bug.close()
    assert caught is not None and caught.prop == "drain", str(caught)


def test_the_suite_passes_a_correct_server() -> None:
    try:
        assert hunt(SERVER_CONTROL, settings=pinned(10, shrink=False), check="drain") is None
    finally:
        SERVER_CONTROL.close()


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, "drain", pinned(30))


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
