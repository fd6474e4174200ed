"""The engines' clocks: wall time, or this thread's CPU time, which a time slice given to
another process does not advance (engines.bench.clocks)."""

from __future__ import annotations

import time

import pytest

from engines.bench import cli, clocks, draws, traces
from engines.bench.config import Config
from engines.bench.doubles.fake import FakeEngine
from engines.bench.paired import EngineClock, run_paired


def test_an_engine_clock_counts_its_source_only_while_running() -> None:
    source = [10.0]
    clock = EngineClock(lambda: source[0])
    clock.resume()
    source[0] = 10.5
    assert clock.now() == 0.5
    clock.pause()
    source[0] = 20.0  # paused: none of this counts
    assert clock.now() == 0.5
    clock.resume()
    source[0] = 21.0
    assert clock.now() == 1.5
    clock.sleep_until(30.0)  # sleeping jumps ahead
    assert clock.now() == 30.0


def test_the_cpu_clock_does_not_count_time_the_cpu_spent_elsewhere() -> None:
    # The fake sleeps 5 ms a step on the wall clock: like a step preempted for a time slice,
    # it takes wall time and almost no CPU time of this thread.
    trace = traces.closed(draws.uniform(2, prompt_len=4, max_tokens=4, vocab_size=100))
    runs = {name: run_paired({"e": FakeEngine(max_batch_size=2, base_s=0.005)}, {"e": trace},
                             time_source=clocks.source(name))["e"]
            for name in ("wall", "cpu")}
    steps = len(runs["wall"].steps)
    assert runs["wall"].step_s >= 0.005 * steps
    assert runs["cpu"].step_s < 0.2 * 0.005 * steps


def _args(*argv: str) -> tuple[str, str]:
    args = cli._parser().parse_args(list(argv))
    return cli._clock(args, "cpu"), cli._clock(args, "cuda")


def test_auto_takes_the_steady_clock_only_for_the_default_engines_on_one_thread() -> None:
    # The wall clock by default; the noisy-host kit's steady clock where the kit is on (a
    # --quick run on a CPU, or --host on) for the default engines on one thread.
    assert _args() == ("wall", "wall")
    assert _args("--quick") == ("steady", "wall")
    assert _args("--host", "on") == ("steady", "wall")
    assert _args("--quick", "--host", "off") == ("wall", "wall")
    assert _args("--quick", "--threads", "2") == ("wall", "wall")
    assert _args("--quick", "--engine", "engines.bench.doubles.fake:static") == ("wall", "wall")
    assert _args("--clock", "wall")[0] == "wall"
    assert _args("--engine", "engines.bench.doubles.fake:static", "--clock", "cpu")[0] == "cpu"
    for name in ("cpu", "steady"):
        with pytest.raises(ValueError, match=f"--clock {name}: the noisy-host kit's clock"):
            cli.host(cli._parser().parse_args(["--clock", name, "--host", "off"]), "cpu")
        with pytest.raises(ValueError, match=f"--clock {name}: needs --threads 1"):
            _args("--clock", name, "--threads", "2")
        with pytest.raises(ValueError, match=f"clock: '{name}' times work on this thread only"):
            Config(device="cuda", clock=name)
    with pytest.raises(ValueError, match="clock: must be one of wall, cpu, steady, got 'gpu'"):
        Config(clock="gpu")
    with pytest.raises(ValueError, match="clock: 'steady' is built with its gauge"):
        clocks.source("steady")


def test_thread_time_is_this_threads_cpu() -> None:
    assert clocks.CLOCKS["cpu"] is time.thread_time and clocks.CLOCKS["wall"] is time.perf_counter
