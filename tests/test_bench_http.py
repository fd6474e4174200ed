"""The bench over HTTP: a streaming engine's tokens are timed by their arrival at the client,
its requests are sent on time, the paired driver runs it alone on the wall clock, and
`batching-bench replay` drives it at given rates. Against tests/fake_server.py, whose `sent`
says when each message really left the server (its sleeps overshoot on a busy machine, so
the schedule itself is only the loose bound)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.bench import rates, traces  # noqa: E402
from engines.bench.cli import main  # noqa: E402
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
    """An engine whose driver is busy `busy_s` after every step (other work, a GC pause, other
    engines' turns): tokens keep arriving meanwhile, and only their arrival times say when."""

    def __init__(self, inner: HTTPEngine, busy_s: float) -> None:
        self.inner, self.busy_s = inner, busy_s
        self.vocab_size, self.max_model_len = inner.vocab_size, inner.max_model_len
        self.arrival_times = inner.arrival_times

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def has_work(self) -> bool:
        return self.inner.has_work()

    def step(self) -> list[StepOutput]:
        out = self.inner.step()
        time.sleep(self.busy_s)
        return out

    def __getattr__(self, name: str) -> Any:  # step_by, when the inner engine has one
        return getattr(self.inner, name)


def items(n: int, max_tokens: int) -> list[WorkItem]:
    # Distinct first tokens below the fake's triggers (60-63): the fake's `sent` is per prompt.
    return [WorkItem((i + 1, 2, 3), max_tokens) for i in range(n)]


def engine_at(url: str, cls: type[HTTPEngine] = HTTPEngine) -> HTTPEngine:
    """A warmed adapter: its first request starts the client's loop thread and connection
    pool (tens of ms on a busy core), which a timed run must not pay (the replay warms up)."""
    engine = cls(url, vocab_size=fake_server.VOCAB)
    run_trace(engine, traces.closed([WorkItem((50, 51), 1)], tag="warm"), clock=WallClock())
    return engine


def server_view(state: State, run: Run) -> pd.DataFrame:
    """Per request: when the server sent each message and when the bench says each token came
    (both on this process's perf_counter: the fake serves in-process), and both TTFTs: the
    server's from receiving the request, the bench's from sending it (TTFT minus queue wait:
    for a streaming engine, from add_request)."""
    req = requests_frame(run).set_index("request_id")
    tok = tokens_frame(run)
    rows = []
    for arrival in run.trace.arrivals:
        received, sent = state.sent[arrival.item.prompt_token_ids]
        came = run.origin_s + tok[tok["request_id"] == arrival.request_id]["time_s"].to_numpy()
        rows.append({"late": (came - np.asarray(sent)).tolist(),
                     "server_ttft": sent[0] - received,
                     "bench_ttft": req.loc[arrival.request_id, "ttft_s"]
                     - req.loc[arrival.request_id, "queue_wait_s"],
                     "bench_itl": np.diff(came).tolist()})
    return pd.DataFrame(rows)


def check_times(state: State, run: Run) -> None:
    view = server_view(state, run)
    late = np.concatenate(view["late"].to_list())
    # Every token (the first included: TTFT) within a few ms after the server sent it, never
    # before. A median and a p90: on a shared core the fake server's threads and the client's
    # share one interpreter (a real server is another process), and a read now and then
    # waits out a GIL switch or a time slice.
    assert late.min() > -0.0005 and np.median(late) < 0.002 and np.quantile(late, 0.9) < 0.010, (
        f"token times off the server's sends by {late}")
    # TTFT from the send: the server's own plus the request's way in, never less.
    assert (view["bench_ttft"] > view["server_ttft"]).all(), view
    # And near the fake's schedule (its sleeps overshoot under load, never undershoot).
    itl = np.concatenate(view["bench_itl"].to_list())
    assert DELAY - 0.002 < np.median(itl) < DELAY + 0.015, itl
    assert FIRST_DELAY - 0.002 < view["bench_ttft"].median() < FIRST_DELAY + 0.05, view


def timed_run(url: str, state: State, cls: type[HTTPEngine]) -> Run:
    state.first_delay, state.delay = FIRST_DELAY, DELAY
    engine = BusyDriver(engine_at(url, cls), busy_s=0.045)
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


def sent_late(url: str, state: State, cls: type[HTTPEngine]) -> pd.Series:
    state.first_delay, state.delay = 0.0, 0.2  # slow streams: a token every 200 ms
    trace = traces.constant(items(6, 3), 20.0, tag="s")  # a request due every 50 ms
    run = run_trace(engine_at(url, cls), trace, clock=WallClock())
    return requests_frame(run)["queue_wait_s"]  # arrival to add_request


def test_requests_are_sent_on_time_while_streams_are_slow(fake: tuple[str, State]) -> None:
    url, state = fake
    assert sent_late(url, state, HTTPEngine).max() < 0.015


def test_without_step_by_a_slow_stream_delays_the_next_send(fake: tuple[str, State]) -> None:
    url, state = fake
    assert sent_late(url, state, NoStepBy).max() > 0.05


def test_paired_runs_a_server_alone_on_the_wall_clock(fake: tuple[str, State]) -> None:
    url, state = fake
    state.first_delay, state.delay = FIRST_DELAY, DELAY
    server = engine_at(url)
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


def test_replay_drives_a_server_at_the_rates_given(from_env: State, tmp_path: Path) -> None:
    data = tmp_path / "guidellm.jsonl"
    assert bench("replay", "--rates", "8,16", "--arrivals", "constant", "--requests", "6",
                 "--prompt-tokens", "4", "--output-tokens", "3", "--out", str(tmp_path),
                 "--export-guidellm", str(data), plots=True) == 0
    assert (tmp_path / "rate.png").stat().st_size > 0
    table = pd.read_csv(tmp_path / "replay.csv")
    assert list(table["offered_rps"]) == [8, 16]
    assert list(table["completed"]) == [6, 6]
    assert (table["ttft_p50_s"] > 0.02).all() and (table["ttft_p50_s"] < 0.1).all()
    assert ((table["itl_p50_s"] > 0.009) & (table["itl_p50_s"] < 0.03)).all()
    assert set(pd.read_csv(tmp_path / "tokens.csv")["offered_rps"]) == {8, 16}
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(rows) == 6
    for row in rows:
        words = row["prompt"].split()
        assert len(words) == row["prompt_tokens_count"] == 4 and row["output_tokens_count"] == 3
        assert all(w[0] == "t" and 0 <= int(w[1:]) < fake_server.VOCAB for w in words)
    # 6 warm-up requests of the same prompts reached the server first, then 2 x 6.
    assert len(from_env.sent) <= 6


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
