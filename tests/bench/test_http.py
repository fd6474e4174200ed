"""The bench over HTTP: a streaming engine's tokens are timed by their arrival at the client,
its requests are sent on time, the paired driver runs it alone on the wall clock, and
`batching-bench replay` drives it at given rates. Against tests/fake_server.py, whose `sent`
says when each message really left the server. Every timing claim is an order of events on
one clock (sent before it came, came before its step ended) or a lower bound the fake's sleeps
guarantee: a loaded machine stretches every interval, so no unit test here bounds one from
above (how fast the bench is over HTTP is docs/benchmarks.md's, measured with the load
stated)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine, ServerStalled  # noqa: E402
from engines.bench import rates, traces  # noqa: E402
from engines.bench.cli import main  # noqa: E402
from engines.bench.declarations import step_by  # noqa: E402
from engines.bench.doubles.fake import FakeEngine  # noqa: E402
from engines.bench.draws import WorkItem  # noqa: E402
from engines.bench.metrics import requests_frame, tokens_frame  # noqa: E402
from engines.bench.paired import run_paired  # noqa: E402
from engines.bench.replay import Run, WallClock, run_trace  # noqa: E402
from engines.bench.streaming import streams  # noqa: E402
from engines.protocol import Engine, Request, StepOutput  # noqa: E402
from tests import fake_server  # noqa: E402
from tests.fake_server import State  # noqa: E402
from tests.planted.http_bench_bugs import NoArrivalTimes, NoStepBy  # noqa: E402

FIRST_DELAY, DELAY = 0.08, 0.03


@pytest.fixture
def fake() -> Iterator[tuple[str, State]]:
    with fake_server.serving() as served:
        yield served


class BusyDriver:
    """An engine whose driver is busy after every step (other work, a GC pause, other engines'
    turns) until the client holds a message that the next step will collect: tokens keep
    arriving meanwhile, and only their arrival times say when. Busy until the message came,
    not for a set time, so that some token surely arrives between two steps however loaded
    the machine (the wait gives up after 10 s, which only weakens the run, never passes it)."""

    def __init__(self, inner: HTTPEngine) -> None:
        self.inner = inner
        self.vocab_size, self.max_model_len = inner.vocab_size, inner.max_model_len
        self.arrival_times = inner.arrival_times

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def has_work(self) -> bool:
        return self.inner.has_work()

    def _busy(self) -> None:
        # The adapter's queue of received messages: a test double may look inside.
        arrived = self.inner._client.arrivals
        give_up = time.perf_counter() + 10
        while self.inner.has_work() and arrived.empty() and time.perf_counter() < give_up:
            time.sleep(0.001)

    def step(self) -> list[StepOutput]:
        out = self.inner.step()
        self._busy()
        return out

    def step_by(self, deadline: float) -> list[StepOutput]:
        until = step_by(self.inner)
        out = until(deadline) if until is not None else self.inner.step()
        self._busy()
        return out


def items(n: int, max_tokens: int) -> list[WorkItem]:
    # Distinct first tokens below the fake's triggers (60-63): the fake's `sent` is per prompt.
    return [WorkItem((i + 1, 2, 3), max_tokens) for i in range(n)]


def engine_at(url: str, cls: type[HTTPEngine] = HTTPEngine, **kw: float) -> HTTPEngine:
    """A warmed adapter: its first request starts the client's loop thread and connection
    pool (tens of ms on a busy core), which a timed run must not pay (the replay warms up)."""
    engine = cls(url, vocab_size=fake_server.VOCAB, **kw)  # type: ignore[arg-type]
    run_trace(engine, traces.closed([WorkItem((50, 51), 1)], tag="warm"), clock=WallClock())
    return engine


def server_view(state: State, run: Run) -> pd.DataFrame:
    """Per token: when the server sent it, when the bench says it came, and the start and end
    of the driver's step that returned it; per request, both TTFTs: the server's from
    receiving the request, the bench's from sending it (TTFT minus queue wait: for a
    streaming engine, from add_request). All on this process's perf_counter (the fake serves
    in-process), relative to the run's start."""
    req = requests_frame(run).set_index("request_id")
    tok = tokens_frame(run)
    rows = []
    for arrival in run.trace.arrivals:
        rid = arrival.request_id
        received, sent = state.sent[arrival.item.prompt_token_ids]
        came = tok[tok["request_id"] == rid]["time_s"].to_list()
        steps = [run.steps[i] for i in run.token_steps[rid]]
        server_ttft = sent[0] - received
        bench_ttft = req.loc[rid, "ttft_s"] - req.loc[rid, "queue_wait_s"]
        for k, at in enumerate(came):
            rows.append({"request_id": rid, "token": k, "sent": sent[k] - run.origin_s,
                         "came": at, "step_start": steps[k].start_s, "step_end": steps[k].end_s,
                         "server_ttft": server_ttft, "bench_ttft": bench_ttft})
    return pd.DataFrame(rows)


def check_times(state: State, run: Run) -> None:
    """The bench's token times are when each token reached the client, checked by order alone
    (no bound on how late anything may run, which a loaded machine would break): never before
    the server sent it, never after the step that returned it ended, and for some token
    before that step even began (it came while the driver was busy): a driver that timed
    tokens by its polling would put every token at its step."""
    view = server_view(state, run)
    assert (view["came"] >= view["sent"]).all(), (
        f"token times off the server's sends: some came before they were sent\n{view}")
    assert (view["came"] <= view["step_end"]).all(), (
        f"token times off the server's sends: some after the step that returned them\n{view}")
    assert (view["came"] < view["step_start"]).any(), (
        f"token times off the server's sends: every token timed at its step\n{view}")
    # TTFT from the send: the server's own plus the request's way in, never less; and never
    # less than the fake's prefill, which its sleep only ever overshoots.
    firsts = view[view["token"] == 0]
    assert (firsts["bench_ttft"] > firsts["server_ttft"]).all(), firsts
    assert (firsts["server_ttft"] >= FIRST_DELAY).all(), firsts


def timed_run(url: str, state: State, cls: type[HTTPEngine]) -> Run:
    state.first_delay, state.delay = FIRST_DELAY, DELAY
    engine = BusyDriver(engine_at(url, cls))
    trace = traces.constant(items(6, 6), 4.0, tag="t")
    return run_trace(engine, trace, clock=WallClock())


def test_ttft_and_itl_are_the_clients_arrival_times(fake: tuple[str, State]) -> None:
    url, state = fake
    run = timed_run(url, state, HTTPEngine)
    assert set(run.token_times) == {a.request_id for a in run.trace.arrivals}
    check_times(state, run)


def test_without_arrival_times_the_figures_are_the_drivers_polling(
        fake: tuple[str, State]) -> None:
    url, state = fake
    run = timed_run(url, state, NoArrivalTimes)
    assert not run.token_times
    with pytest.raises(AssertionError, match="token times off the server's sends"):  # it bites
        check_times(state, run)


def sent_while_streams_hold(url: str, state: State, cls: type[HTTPEngine]) -> Run:
    """Six requests due 50 ms apart while the server sends no token before all six came in:
    a driver that waits for a stream's next token before sending the next request never
    sends them (its step stalls out instead); one whose wait ends when the next request is
    due sends them all. An order of events, so no load can make either pass for the other."""
    engine = engine_at(url, cls, stall_timeout=1.0 if cls is NoStepBy else 60.0)
    state.delay, state.hold_for = 0.0, state.streams + 6  # the warm-up's came in already
    trace = traces.constant(items(6, 3), 20.0, tag="s")
    return run_trace(engine, trace, clock=WallClock())


def test_requests_are_sent_on_time_while_streams_are_slow(fake: tuple[str, State]) -> None:
    url, state = fake
    run = sent_while_streams_hold(url, state, HTTPEngine)
    assert state.streams == 6 + 1  # the warm-up's, then all six, before any token
    assert run.finish_reason == dict.fromkeys(run.added_s, "length")
    tok = tokens_frame(run)
    assert (tok["time_s"].min() > max(run.added_s.values())), "a token came before all were sent"


def test_without_step_by_a_slow_stream_delays_the_next_send(fake: tuple[str, State]) -> None:
    url, state = fake
    with pytest.raises(ServerStalled):
        sent_while_streams_hold(url, state, NoStepBy)
    assert state.streams == 1 + 1  # the warm-up's, then the first: the driver waited on it


def test_paired_runs_a_server_alone_on_the_wall_clock(fake: tuple[str, State]) -> None:
    url, state = fake
    state.first_delay, state.delay = FIRST_DELAY, DELAY
    server = BusyDriver(engine_at(url))
    turns: list[float] = []
    engines: dict[str, Engine] = {"in-process": FakeEngine(base_s=0.002), "server": server}
    trace = traces.constant(items(4, 4), 5.0, tag="p")
    runs = run_paired(engines, dict.fromkeys(engines, trace),
                      between=lambda: turns.append(time.perf_counter()))
    assert streams(server) and not streams(engines["in-process"])
    check_times(state, runs["server"])
    timed = [state.sent[a.item.prompt_token_ids] for a in trace.arrivals]
    first = min(received for received, _ in timed)
    assert turns and max(turns) < first, "the yardstick took turns during the server's run"
    assert all(len(t) == 4 for t in runs["server"].token_times.values())
    assert len(runs["in-process"].token_steps) == 4


def test_arrival_times_must_cover_every_token() -> None:
    class Short:
        vocab_size, max_model_len = 64, 48

        def __init__(self) -> None:
            self.done = False

        def add_request(self, request: Request) -> None:
            self.rid: Hashable = request.request_id

        def has_work(self) -> bool:
            return not self.done

        def step(self) -> list[StepOutput]:
            self.done = True
            from engines.protocol import FinishReason

            return [StepOutput(self.rid, (1, 2), FinishReason.LENGTH)]

        def arrival_times(self) -> dict[Hashable, list[float]]:
            return {self.rid: [time.perf_counter()]}  # one time for two tokens

    with pytest.raises(ValueError, match="arrival_times: .* 1 time"):
        run_trace(Short(), traces.closed(items(1, 2)), clock=WallClock())  # type: ignore[arg-type]


@pytest.fixture
def from_env(fake: tuple[str, State], monkeypatch: pytest.MonkeyPatch) -> State:
    url, state = fake
    state.first_delay, state.delay = 0.02, 0.01
    monkeypatch.setenv("BATCHING_ENGINE_URL", url)
    monkeypatch.setenv("BATCHING_ENGINE_VOCAB_SIZE", str(fake_server.VOCAB))
    return state


def bench(*argv: str, plots: bool = False) -> int:
    return main([*argv, "--engine", "srv=engines.adapters.http:from_env", "--no-progress",
                 *(() if plots else ("--no-plots",))])


def test_exact_prompts_replays_the_trace_as_drawn(from_env: State, tmp_path: Path) -> None:
    """--exact-prompts: every run sends the trace's own prompts (the bench before
    engines.bench.fresh), and the report says a prefix cache may be warm."""
    assert bench("replay", "--rates", "8,16", "--arrivals", "constant", "--requests", "6",
                 "--prompt-tokens", "4", "--output-tokens", "3", "--out", str(tmp_path),
                 "--exact-prompts") == 0
    assert len(from_env.sent) == 6  # the warm-up's 6 prompts, then the same 6 at each rate
    notes = json.loads((tmp_path / "report.json").read_text())["notes"]
    assert any("--exact-prompts" in line for line in notes)


def test_replay_drives_a_server_at_the_rates_given(from_env: State, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "guidellm.jsonl"
    assert bench("replay", "--rates", "8,16", "--arrivals", "constant", "--requests", "6",
                 "--prompt-tokens", "4", "--output-tokens", "3", "--out", str(tmp_path),
                 "--export-guidellm", str(data), plots=True) == 0
    assert (tmp_path / "rate.png").stat().st_size > 0
    table = pd.read_csv(tmp_path / "replay.csv")
    assert list(table["offered_rps"]) == [8, 16]
    assert list(table["completed"]) == [6, 6]
    # Timed, and no faster than the fake's sleeps (which a loaded machine only lengthens):
    # how much slower is no unit test's business (docs/benchmarks.md).
    assert (table["ttft_p50_s"] >= 0.02).all()
    assert (table["ttft_p95_s"] >= table["ttft_p50_s"]).all()
    assert (table["itl_p50_s"] > 0).all()
    assert set(pd.read_csv(tmp_path / "tokens.csv")["offered_rps"]) == {8, 16}
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        words = row["prompt"].split()
        assert len(words) == row["prompt_tokens_count"] == 4 and row["output_tokens_count"] == 3
        assert all(w[0] == "t" and 0 <= int(w[1:]) < fake_server.VOCAB for w in words)
    # Every run sends prompts of its own (engines.bench.fresh): the warm-up's 6, then 6 a
    # rate, the same requests past their first token.
    assert len(from_env.sent) == 18
    assert len({prompt[1:] for prompt in from_env.sent}) == 6
    # The run's report renders its table and its rate plot again.
    printed = capsys.readouterr().out
    for rendered in ("replay.csv", "rate.png"):
        (tmp_path / rendered).unlink()
    assert main(["render", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == printed
    assert (tmp_path / "rate.png").stat().st_size > 0
    assert pd.read_csv(tmp_path / "replay.csv").equals(table)


@pytest.mark.parametrize(("argv", "message"), [
    (("replay",), "--rates: replay needs"),
    (("replay", "--rates", "2,0"), "--rates: every rate must be > 0"),
    (("replay", "--rates", "2,x"), "--rates: 'x' is not a number"),
    (("replay", "--rates", "2", "--prompt-tokens", "4"), "give both"),
    (("replay", "--rates", "2", "--prompt-tokens", "40", "--output-tokens", "9"),
     "exceeds the engines' context"),
    (("replay", "--rates", "2", "--clock", "cpu"), "--clock cpu: replay"),
    (("compare",), "--slo-ttft and --slo-itl: srv stream"),
])
def test_bad_input_names_the_option(from_env: State, argv: tuple[str, ...], message: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench(*argv)
    assert message in capsys.readouterr().err


def test_workload_and_rates_parsing() -> None:
    assert rates.parse_rates("1,2.5") == [1.0, 2.5]
    fixed = rates.workload(5, max_model_len=48, vocab_size=64, seed=0, prompt_tokens=7,
                           output_tokens=2)
    assert {(w.prompt_len, w.max_tokens) for w in fixed} == {(7, 2)}
    const = traces.constant(fixed, 4.0)
    assert [a.at_s for a in const.arrivals] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    mixed: Callable[..., list[WorkItem]] = rates.workload
    assert len({w.prompt_len for w in mixed(40, max_model_len=512, vocab_size=64,
                                            seed=0)}) > 1


VLLM_PYTHON = os.environ.get("BATCHING_VLLM_PYTHON")


@pytest.mark.skipif(not VLLM_PYTHON, reason="BATCHING_VLLM_PYTHON is not set (the vLLM venv's "
                    "python; ci/test-third-party.sh sets it beside the HTTP suite run, in the "
                    "same pytest process, so that the server started once serves both)")
def test_bench_replay_on_vllms_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CI's bench smoke over HTTP: `batching-bench replay` on vLLM's OpenAI server (launched
    once per process: the suite's server where the suite ran first), 32 requests at 4 req/s."""
    started = time.perf_counter()
    assert main(["replay", "--engine", "vllm=engines.adapters.http:vllm_server", "--rates", "4",
                 "--requests", "32", "--prompt-tokens", "32", "--output-tokens", "16",
                 "--out", str(tmp_path), "--no-plots", "--no-progress"]) == 0
    row = pd.read_csv(tmp_path / "replay.csv").iloc[0]
    requests = pd.read_csv(tmp_path / "requests.csv")
    assert row["completed"] == 32 and (requests["n_tokens"] == 16).all()
    assert 0 < row["ttft_p50_s"] <= row["ttft_p95_s"] < 30
    assert 0 < row["itl_p50_s"] < 5 and row["output_tokens_per_s"] > 0
    with capsys.disabled():
        print(f"\nbench smoke over HTTP: {time.perf_counter() - started:.0f} s (server start "
              f"included where this process had none); achieved {row['achieved_rps']:.2f} "
              f"req/s, TTFT p50 {row['ttft_p50_s'] * 1000:.0f} ms, ITL p50 "
              f"{row['itl_p50_s'] * 1000:.1f} ms")
