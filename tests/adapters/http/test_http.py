"""The HTTP adapter and the server launcher: against a fake server (tests/fake_server.py,
stdlib, in a thread) everywhere, and against vLLM's real OpenAI server where the vLLM venv
exists and BATCHING_VLLM_PYTHON names its python (ci/vllm-env.sh builds it), skipped visibly
elsewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine, ServerError, ServerStalled, from_env  # noqa: E402
from engines.adapters.http.adapter import RefusedInStream, server_busy  # noqa: E402
from engines.adapters.http.launch import LaunchError, launch, running  # noqa: E402
from engines.protocol import (  # noqa: E402
    Abortable,
    Engine,
    FinishReason,
    InvalidRequest,
    KVIntrospection,
    LoadIntrospection,
    Request,
    SamplingParams,
    SlotIntrospection,
    StepOutput,
    capabilities_of,
)
from tests import fake_server  # noqa: E402
from tests.fake_server import (  # noqa: E402
    DIE,
    LATE,
    REFUSAL,
    REFUSE,
    STALL,
    State,
    continuation,
)
from tests.helpers import drain  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake() -> Iterator[tuple[str, State]]:
    with fake_server.serving() as served:
        yield served


def engine_at(url: str, **kw: object) -> HTTPEngine:
    return HTTPEngine(url, vocab_size=fake_server.VOCAB, **kw)  # type: ignore[arg-type]


def test_tokens_stream_in_per_step_deltas_with_finish_reasons(fake: tuple[str, State]) -> None:
    url, state = fake
    eng = engine_at(url)
    assert isinstance(eng, Engine) and isinstance(eng, Abortable)
    # Nothing over HTTP shows slots or blocks: those protocols are absent, not faked.
    assert not isinstance(eng, SlotIntrospection) and not isinstance(eng, KVIntrospection)
    assert (eng.max_model_len, eng.model) == (fake_server.MAX_MODEL_LEN, "fake")  # /v1/models
    stop = continuation([4], 5)[2]
    requests = [Request((1, 2, 3), SamplingParams(max_tokens=5), request_id="a"),
                Request((4,), SamplingParams(max_tokens=5, stop_token_ids=(stop,)),
                        request_id="b")]
    # The server sends one token per permit, and a permit goes out only once a step has
    # returned the token before it: each step can collect exactly the one token sent since
    # the last (an order of events, so a loaded machine cannot merge two into one step).
    state.gate = threading.Semaphore(1)
    steps: list[int] = []

    def on_step(_: int, outs: list[StepOutput]) -> None:
        tokens = sum(len(o.token_ids) for o in outs)
        steps.append(tokens)
        if tokens:
            state.gate.release()  # type: ignore[union-attr]

    got = drain(eng, requests, on_step=on_step)
    assert got == {"a": (continuation([1, 2, 3], 5), FinishReason.LENGTH),
                   "b": (continuation([4], 3), FinishReason.STOP)}  # the stop id included
    # Streamed as it was sent, a token per step, not held back and handed over together.
    assert [n for n in steps if n] == [1] * (5 + 3), steps
    assert not eng.has_work()
    sent = {b["prompt"][0]: b for b in state.bodies}
    assert sent[1]["stream"] and sent[1]["return_token_ids"] and sent[1]["ignore_eos"]
    assert sent[1]["model"] == "fake" and sent[4]["stop_token_ids"] == [stop]


def test_sampling_fields_and_logprobs_reach_the_server(fake: tuple[str, State]) -> None:
    url, state = fake
    eng = engine_at(url)
    params = SamplingParams(max_tokens=2, temperature=0.7, seed=5, top_k=3, top_p=0.9,
                            min_p=0.1, repetition_penalty=1.2, presence_penalty=0.5,
                            frequency_penalty=-0.5, min_tokens=1, logprobs=2)
    outs = []
    eng.add_request(Request((9,), params))
    while eng.has_work():
        outs += eng.step()
    (body,) = state.bodies
    assert {k: body[k] for k in ("temperature", "seed", "top_k", "top_p", "min_p",
                                 "repetition_penalty", "presence_penalty",
                                 "frequency_penalty", "min_tokens", "logprobs")} == {
        "temperature": 0.7, "seed": 5, "top_k": 3, "top_p": 0.9, "min_p": 0.1,
        "repetition_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": -0.5,
        "min_tokens": 1, "logprobs": 2}
    assert body["return_tokens_as_token_ids"]
    tokens = [t for o in outs for t in o.token_ids]
    tops = [m for o in outs for m in o.top_logprobs or ()]
    # Keyed by token id (the server's "token_id:N" strings read back), one per token.
    assert [sorted(m) for m in tops] == [sorted({t, (t + 1) % 64}) for t in tokens]
    assert [lp for o in outs for lp in o.logprobs or ()] == pytest.approx([-0.6931] * 2,
                                                                           abs=1e-4)


def test_a_400_is_invalid_request_with_the_servers_message(fake: tuple[str, State]) -> None:
    url, _ = fake
    eng = engine_at(url)
    keep = Request((2, 2), SamplingParams(max_tokens=4), request_id="keep")
    eng.add_request(keep)
    with pytest.raises(InvalidRequest, match=re.escape(REFUSAL)):
        eng.add_request(Request((REFUSE, 1), SamplingParams(max_tokens=2), request_id="bad"))
    # Refused without side effects: the id is free again, the other request finishes.
    assert drain(eng, [Request((3,), SamplingParams(max_tokens=1), request_id="bad")]) == {
        "bad": (continuation([3], 1), FinishReason.LENGTH),
        "keep": (continuation([2, 2], 4), FinishReason.LENGTH)}


def test_a_refusal_inside_the_stream_is_a_clear_error(fake: tuple[str, State]) -> None:
    url, state = fake
    eng = engine_at(url)
    eng.add_request(Request((LATE, 1), SamplingParams(max_tokens=2), request_id="late"))
    with pytest.raises(RefusedInStream, match="refused request 'late' inside its stream .*"
                       r"code 400.*" + re.escape(REFUSAL)):
        eng.step()
    # A declared limit refuses up front instead, naming the field and the value.
    capped = engine_at(url, max_logprobs=2)
    with pytest.raises(InvalidRequest, match=r"logprobs: 3 is more .* \(max_logprobs 2\)"):
        capped.add_request(Request((1,), SamplingParams(max_tokens=1, logprobs=3)))
    assert len(state.bodies) == 1 and not capped.has_work()


def test_bad_input_is_refused_before_the_server(fake: tuple[str, State]) -> None:
    url, state = fake
    eng = engine_at(url)
    for bad in (Request(()), Request((64,)), Request((1,), SamplingParams(max_tokens=48))):
        with pytest.raises(InvalidRequest):
            eng.add_request(bad)
    assert state.bodies == [] and not eng.has_work()


def test_a_stalled_server_fails_the_step_within_the_stall_timeout(
        fake: tuple[str, State]) -> None:
    url, _ = fake
    eng = engine_at(url, stall_timeout=0.5)
    eng.add_request(Request((STALL, 1), SamplingParams(max_tokens=4), request_id="s"))
    start = time.monotonic()
    with pytest.raises(ServerStalled, match="nothing arrived"):
        while eng.has_work():
            eng.step()
    # httpx's read timeout or the step's own wait, whichever comes first, is ServerStalled:
    # never a hang. The bound is loose (40x the timeout) so that no load can break it.
    assert time.monotonic() - start < 20.0


def test_a_stream_cut_mid_request_is_a_clear_error(fake: tuple[str, State]) -> None:
    url, _ = fake
    eng = engine_at(url)
    eng.add_request(Request((DIE, 1), SamplingParams(max_tokens=4), request_id="d"))
    with pytest.raises(ServerError, match="request 'd'"):
        while eng.has_work():
            eng.step()


def test_a_dead_server_is_a_clear_error_not_a_hang(fake: tuple[str, State]) -> None:
    url, _ = fake
    eng = engine_at(url)
    dead = launch_free_url()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ServerError, match="GET .*/v1/models failed"):
        engine_at(dead)
    eng.url = dead  # the server went away after the adapter was built
    eng._client = type(eng._client)(dead, connect_timeout=1.0, stall_timeout=1.0)
    with pytest.raises(ServerError, match="POST .* failed: ConnectError"):
        eng.add_request(Request((1,), SamplingParams(max_tokens=1)))
    assert time.monotonic() - start < 5.0 and not eng.has_work()


def launch_free_url() -> str:
    from engines.adapters.http.launch import free_port

    return f"http://127.0.0.1:{free_port()}"


def test_abort_closes_the_stream_and_emits_one_abort(fake: tuple[str, State]) -> None:
    url, state = fake
    state.delay = 0.05
    eng = engine_at(url)
    eng.add_request(Request((1,), SamplingParams(max_tokens=40), request_id="v"))
    eng.add_request(Request((2,), SamplingParams(max_tokens=3), request_id="o"))
    eng.step()
    eng.abort_request("v")
    eng.abort_request("never-added")
    assert eng.has_work()
    first = {o.request_id: o for o in eng.step()}
    assert first["v"].token_ids == () and first["v"].finish_reason is FinishReason.ABORT
    rest = []
    while eng.has_work():
        rest += eng.step()
    assert rest and all(o.request_id == "o" for o in rest)
    # The fake server counts the disconnect, then (a moment later) the request as done.
    deadline = time.monotonic() + 5
    while (state.disconnects < 1 or server_busy(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.disconnects == 1 and server_busy(url) == 0  # the server saw the disconnect


def test_a_new_adapter_waits_for_a_drained_server(fake: tuple[str, State]) -> None:
    url, state = fake
    state.leftover = 1  # a request someone else left running
    start = time.monotonic()
    eng = engine_at(url, drain_timeout=0.3)  # waited, then left it to the drain check
    assert time.monotonic() - start >= 0.3 and eng.wait_drained(0.0) == 1
    state.leftover = 0
    assert eng.wait_drained(0.0) == 0
    busy = engine_at(url)
    state.delay = 0.2
    busy.add_request(Request((1,), SamplingParams(max_tokens=20)))
    busy.step()
    # This process's own live requests do not count as left behind.
    assert engine_at(url, drain_timeout=0.3).max_model_len == fake_server.MAX_MODEL_LEN
    busy.close()


def test_the_llama_dialect(fake: tuple[str, State]) -> None:
    url, state = fake
    eng = engine_at(url, dialect="llama")
    assert eng.max_model_len == fake_server.MAX_MODEL_LEN
    assert capabilities_of(eng).max_concurrency == 3  # /props
    assert capabilities_of(eng).logprobs_of == "raw"  # n_probs without post_sampling_probs
    request = Request((5, 6), SamplingParams(max_tokens=3))
    assert drain(eng, [request])[request.request_id] == (continuation([5, 6], 3),
                                                         FinishReason.LENGTH)
    (body,) = state.bodies
    assert body["n_predict"] == 3 and body["return_tokens"] and not body["cache_prompt"]
    assert "n_probs" not in body and body["repeat_last_n"] == 2 + 3  # the whole request
    # Logprobs: each token's top ones from its completion_probabilities.
    request = Request((5, 6), SamplingParams(max_tokens=2, logprobs=2))
    eng.add_request(request)
    outs = [o for _ in range(50) if eng.has_work() for o in eng.step()]
    tops = [m for o in outs for m in o.top_logprobs or ()]
    tokens = [t for o in outs for t in o.token_ids]
    assert tokens == continuation([5, 6], 2) and state.bodies[-1]["n_probs"] == 2
    assert [sorted(m) for m in tops] == [sorted({t, (t + 1) % fake_server.VOCAB})
                                         for t in tokens]
    # stop_token_ids, which llama-server lacks: the adapter stops at the first stop id (STOP,
    # its logprobs cut with it) and closes the stream, so the server stops too.
    state.delay = 0.05
    tokens = continuation([5, 6], 40)
    request = Request((5, 6), SamplingParams(max_tokens=40, stop_token_ids=(tokens[2],),
                                             logprobs=1))
    eng.add_request(request)
    outs = [o for _ in range(50) if eng.has_work() for o in eng.step()]
    assert [t for o in outs for t in o.token_ids] == tokens[:3]
    assert outs[-1].finish_reason is FinishReason.STOP
    assert sum(len(o.top_logprobs or ()) for o in outs) == 3
    assert "stop_token_ids" not in state.bodies[-1]  # not sent: the server has no such field
    deadline = time.monotonic() + 5
    while state.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.disconnects == 1 and state.in_flight == 0
    state.delay = 0.005
    # The cache_prompt variant differs in that field only.
    cached = engine_at(url, dialect="llama-cache-prompt")
    request = Request((5, 6), SamplingParams(max_tokens=3))
    assert drain(cached, [request])[request.request_id][0] == continuation([5, 6], 3)
    assert state.bodies[-1] == {**state.bodies[0], "cache_prompt": True}
    stopped = Request((5, 6), SamplingParams(max_tokens=3, stop_token_ids=(tokens[5],)))
    # A stop id never generated: LENGTH as without one.
    assert drain(cached, [stopped])[stopped.request_id] == (tokens[:3], FinishReason.LENGTH)


def test_llama_server_metrics_text_becomes_a_load() -> None:
    from engines.adapters.http.dialects import llama_counters, llama_load
    from engines.protocol import Load

    # As llama-server --metrics writes them (counters and gauges, HELP and TYPE lines).
    text = ("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n"
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            "llamacpp:prompt_tokens_total 120\n"
            "# HELP llamacpp:requests_processing Number of requests processing\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            "llamacpp:requests_processing 3\n"
            "# TYPE llamacpp:requests_deferred gauge\n"
            "llamacpp:requests_deferred 2\n")
    assert llama_load(text, "s") == Load(3, 2, None, "s")  # no KV usage: not reported
    cached = text + "# TYPE llamacpp:prompt_tokens_cached_total counter\n" \
        "llamacpp:prompt_tokens_cached_total 200\n"
    assert llama_counters(text) is None
    assert llama_counters(cached) == {"prefix_cache_hit_tokens": 200}
    assert llama_load("vllm:num_requests_running 1.0\n", "s") is None  # not llama-server's


def test_from_env_reads_the_url_and_says_what_is_missing(
        fake: tuple[str, State], monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = fake
    monkeypatch.delenv("BATCHING_ENGINE_URL", raising=False)
    with pytest.raises(ValueError, match="BATCHING_ENGINE_URL is not set"):
        from_env()
    monkeypatch.setenv("BATCHING_ENGINE_URL", url)
    with pytest.raises(ValueError, match="BATCHING_ENGINE_VOCAB_SIZE is not set"):
        from_env()
    monkeypatch.setenv("BATCHING_ENGINE_VOCAB_SIZE", "64x")
    with pytest.raises(ValueError, match="BATCHING_ENGINE_VOCAB_SIZE: '64x' is not a number"):
        from_env()
    monkeypatch.setenv("BATCHING_ENGINE_VOCAB_SIZE", "64")
    monkeypatch.setenv("BATCHING_ENGINE_MAX_CONCURRENCY", "4")
    eng = from_env()
    assert (eng.vocab_size, eng.max_model_len) == (64, 48)
    assert capabilities_of(eng).max_concurrency == 4
    with pytest.raises(ValueError, match="dialect: 'grpc'"):
        engine_at(url, dialect="grpc")
    with pytest.raises(ValueError, match="url: 'localhost:8000'"):
        engine_at("localhost:8000")


# -- the launcher ----------------------------------------------------------------------------

FAKE = [sys.executable, "-m", "tests.fake_server", "{port}"]



def test_launch_waits_for_health_and_stop_kills_the_group(launched: None,
                                                         tmp_path: Path) -> None:
    server = launch([*FAKE, "0.5"], env={"PYTHONPATH": str(ROOT)}, timeout=30, name="fake",
                    log=tmp_path / "fake.log")
    assert server.alive and server.started_s >= 0.5 and running() == [server]
    assert engine_at(server.url).max_model_len == fake_server.MAX_MODEL_LEN
    assert "serving on" in server.log.read_text()
    server.stop()
    assert not server.alive and running() == []
    with pytest.raises(ProcessLookupError):
        os.killpg(server.process.pid, 0)  # nothing left in its process group


def test_a_server_that_exits_or_never_gets_healthy_is_an_error(launched: None,
                                                               tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match=r"exited with status 3(.|\n)*no such model"):
        launch([sys.executable, "-c", "import sys; print('no such model'); sys.exit(3)"],
               timeout=30, name="fake", log=tmp_path / "exits.log")
    start = time.monotonic()
    with pytest.raises(LaunchError, match="not healthy .* within 1.0 s"):
        launch([*FAKE, "60"], env={"PYTHONPATH": str(ROOT)}, timeout=1.0, name="fake",
               log=tmp_path / "slow.log")
    assert time.monotonic() - start < 15 and running() == []


def test_no_server_outlives_the_process_that_launched_it(tmp_path: Path) -> None:
    # A process launches a server and exits without stopping it (atexit must); another is
    # killed outright (SIGKILL: no atexit; the guard must); a third is killed while its server
    # is still starting and ignores SIGTERM (vLLM loading its model did: the guard's SIGKILL
    # of the group must).
    for how in ("exit", "kill", "kill while starting"):
        slow = how == "kill while starting"
        script = textwrap.dedent(f"""
            import os, signal, sys, threading
            from engines.adapters.http import launch as L
            L.GRACE = 1.0
            env = {{"PYTHONPATH": {str(ROOT)!r}, "FAKE_IGNORE_SIGTERM": "1"}}
            if {slow!r}:
                real = L.subprocess.Popen
                def spy(*a, **k):
                    p = real(*a, **k)
                    print(p.pid, flush=True)
                    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGKILL)).start()
                    return p
                L.subprocess.Popen = spy
                L.launch({[*FAKE, "30"]!r}, env=env, timeout=60)
            s = L.launch({[*FAKE, "0"]!r}, env=env, timeout=30)
            print(s.process.pid, flush=True)
            if {how!r} == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        group = int(out.stdout.split()[0])  # the guard leads the server's process group
        deadline = time.monotonic() + 15
        while _group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(group), f"{how}: server group {group} still running"


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # a zombie is not running
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped: its parent is gone, init reaps it) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# -- the real server -------------------------------------------------------------------------

def _vllm_python() -> Path | None:
    # Only where asked for by name: a venv found by its default path may still be building
    # (CI builds the third-party venvs in the background while the main tests run), and the
    # server takes minutes to start. ci/test-third-party.sh sets it.
    import os

    from engines.adapters.http.servers import VLLM_PYTHON, vllm_python

    if not os.environ.get(VLLM_PYTHON):
        return None
    try:
        return vllm_python()
    except FileNotFoundError:
        return None


# One test, so that one server serves it (under xdist each worker would launch its own).
@pytest.mark.skipif(_vllm_python() is None, reason="BATCHING_VLLM_PYTHON does not name the "
                    "python of a vLLM venv (bash ci/vllm-env.sh builds .venv-vllm; "
                    "ci/test-third-party.sh sets it): the real-server test did not run")
def test_on_vllms_openai_server(launched: None) -> None:
    from engines.adapters.http import vllm_server
    from tests.helpers import (
        abort_one_of_two_mid_run,
        assert_generate_tokens_with_mid_run_arrivals,
        assert_top_logprobs_match_the_reference,
        make_prompts,
    )

    eng = vllm_server()
    assert (eng.vocab_size, eng.max_model_len, eng.model) == (1024, 512, "tiny")
    assert_generate_tokens_with_mid_run_arrivals(eng, [3, 70, 1, 200])
    # A second factory call reuses the server (one launch per process), drained.
    again = vllm_server()
    assert again.url == eng.url and len(running()) == 1
    _, rest = abort_one_of_two_mid_run(again)
    assert all(o.request_id == "other" for o in rest)
    deadline = time.monotonic() + 10
    while server_busy(eng.url) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_busy(eng.url) == 0  # the closed stream aborted the request on the server
    # The drain check's view: vLLM's own count, at rest, with its KV usage and counters.
    assert isinstance(eng, LoadIntrospection)
    load = eng.load()
    assert (load.running, load.waiting, load.kv_usage) == (0, 0, 0.0), load
    assert set(eng.exercised()) == {"preemptions", "prefix_cache_hit_tokens"}
    # vLLM refuses logprobs past its cap (20) only inside the stream: the factory declares
    # the cap, so the adapter refuses up front.
    (prompt,) = make_prompts([9], seed=4)
    with pytest.raises(InvalidRequest, match=r"max_logprobs 20"):
        eng.add_request(Request(prompt, SamplingParams(max_tokens=2, logprobs=50)))
    # What the server refuses before its stream is an InvalidRequest with its own message:
    # here a prompt past its context, with the adapter told a larger one than it has.
    eng.max_model_len = 1024
    with pytest.raises(InvalidRequest, match="refused request .*maximum context length"):
        eng.add_request(Request(tuple(range(600)), SamplingParams(max_tokens=2)))
    eng.max_model_len = 512
    assert not eng.has_work()
    # Logprobs (served with the WordLevel tokenizer) and min_tokens, against the reference.
    assert_top_logprobs_match_the_reference(
        eng, prompt, SamplingParams(max_tokens=5, logprobs=2, min_tokens=3,
                                    stop_token_ids=(prompt[0],)))


def test_the_server_tokenizer_has_no_token_past_the_vocabulary(tmp_path: Path) -> None:
    # Beside a Qwen2 config, transformers would load Qwen2's tokenizer class, which adds an
    # EOS with id V (past the logits): vLLM's min_tokens mask then kills its engine
    # (docs/findings.md, report 13).
    from transformers import AutoTokenizer, Qwen2Config

    from engines.adapters.http.convert import write_tokenizer

    Qwen2Config(vocab_size=64).save_pretrained(tmp_path)
    write_tokenizer(tmp_path, 64)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert (len(tok), tok.eos_token_id, tok.bos_token_id, tok.pad_token_id) == (64, None, None,
                                                                                None)
    assert tok.convert_ids_to_tokens([0, 63]) == ["t0", "t63"]


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
