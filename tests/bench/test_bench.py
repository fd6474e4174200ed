"""The bench harness on a pure-Python fake engine and a virtual clock: exact and fast."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engines.bench import capacity, disturbance, draws, traces
from engines.bench.config import QUICK_SEARCH_TIE, Config
from engines.bench.doubles.fake import FakeEngine, FakeTimer, LoggedEngine, VirtualClock
from engines.bench.host.gauge import MIN_DECODES, MIN_PREFILLS
from engines.bench.metrics import requests_frame, summarize, tokens_frame
from engines.bench.paired import EngineClock, run_paired
from engines.bench.probes import MAX_GROWTH
from engines.bench.replay import run_trace
from engines.bench.run_context import RunContext
from engines.bench.slo import SLO
from engines.bench.table import TIE


def _items(n: int, prompt_len: int = 8, max_tokens: int = 4) -> list[draws.WorkItem]:
    return draws.uniform(n, prompt_len=prompt_len, max_tokens=max_tokens, vocab_size=100)


def test_mixed_draw_is_seeded_and_fits_the_context() -> None:
    a = draws.mixed(64, max_model_len=512, vocab_size=1000, seed=3)
    b = draws.mixed(64, max_model_len=512, vocab_size=1000, seed=3)
    assert a == b
    classes = draws.prompt_classes(512)
    assert {item.prompt_len for item in a} <= set(classes)
    assert max(classes) + draws.default_budget(512) <= 512  # one very long class fits
    assert all(item.prompt_len + item.max_tokens <= 512 for item in a)


def test_trace_round_trips_and_rates_stretch_one_draw(tmp_path: Path) -> None:
    items = draws.mixed(50, max_model_len=512, vocab_size=1000)
    trace = traces.poisson(items, 3.7, seed=5)
    assert traces.ArrivalTrace.load(trace.save(tmp_path / "t.json")) == trace
    even = traces.constant(items, 3.7)
    assert traces.ArrivalTrace.load(even.save(tmp_path / "c.json")) == even
    doubled = traces.poisson(items, 7.4, seed=5)
    np.testing.assert_allclose([a.at_s for a in doubled.arrivals],
                               [a.at_s / 2 for a in trace.arrivals])


def test_replay_is_exact_and_adds_each_request_at_its_arrival(tmp_path: Path) -> None:
    saved = traces.poisson(_items(40), 20.0, seed=1).save(tmp_path / "t.json")
    trace = traces.ArrivalTrace.load(saved)
    runs = []
    for _ in range(2):
        clock = VirtualClock()
        engine = FakeEngine(max_batch_size=4, base_s=0.01, clock=clock)
        runs.append(run_trace(engine, trace, clock=clock))
    first, second = runs
    assert first.token_steps == second.token_steps
    assert [s.end_s for s in first.steps] == [s.end_s for s in second.steps]
    for arrival in trace.arrivals:
        # Joined as soon as the driver had control: never early, at most one step late.
        added = first.added_s[arrival.request_id]
        assert arrival.at_s <= added <= arrival.at_s + 0.01 + 1e-12


def test_metrics_on_a_synthetic_run() -> None:
    clock = VirtualClock()
    # One slot, 0.1 s per step, three 2-token requests all at t=0: a fully known schedule.
    engine = FakeEngine(max_batch_size=1, base_s=0.1, clock=clock)
    run = run_trace(engine, traces.closed(_items(3, max_tokens=2)), clock=clock)
    req = requests_frame(run)
    np.testing.assert_allclose(req["queue_wait_s"], [0.0, 0.2, 0.4])
    np.testing.assert_allclose(req["ttft_s"], [0.1, 0.3, 0.5])
    np.testing.assert_allclose(req["e2e_s"], [0.2, 0.4, 0.6])
    tok = tokens_frame(run)
    assert len(tok) == 6 and tok["itl_s"].dropna().tolist() == pytest.approx([0.1] * 3)
    row = summarize(run, slo=SLO(ttft_s=0.35, itl_s=1.0))
    assert row.output_tokens_per_s == pytest.approx(6 / 0.6)
    assert row.ttft_p50_s == pytest.approx(0.3)
    assert row.slo is not None and row.slo.slo_attained == pytest.approx(2 / 3)
    assert row.wasted_slot_steps == 0 and row.completed == 3


def test_closed_mode_records_five_runs_after_two_warmups() -> None:
    clock = VirtualClock()
    engine = FakeEngine(max_batch_size=2, static=True, clock=clock)
    trace = traces.closed([*_items(1, max_tokens=1), *_items(1, max_tokens=5)])
    runs = RunContext(clocks={"static": clock}).closed({"static": engine}, trace, warmup=2,
                                                        runs=5)["static"]
    assert len(runs) == 5 and len({run.id_suffix for run in runs}) == 5
    assert all(run.wasted_slot_steps == 4 for run in runs)  # the short one rides 4 steps


def test_capacity_bracket_is_tight_around_a_known_service_rate() -> None:
    # One slot, one-token requests, 0.1 s a step: the engine serves exactly 10 req/s, and past
    # that its queue wait grows by rate/10 - 1 seconds a second. The rule credits a rate whose
    # latency slopes are at most MAX_GROWTH, so the bracket must sit within 10 .. 10 x 1.05 and
    # five bisection steps must make it narrow.
    true_rate = 10.0
    clock = VirtualClock()
    engine = FakeEngine(max_batch_size=1, base_s=1 / true_rate, clock=clock)
    result = capacity.search(engine, _items(300, max_tokens=1), name="fake", start_rate=7.0,
                             iterations=5, clock=clock)
    assert result.high >= true_rate, result.bracket()
    assert true_rate * 0.97 <= result.low <= true_rate * (1 + MAX_GROWTH)
    assert result.high / result.low <= 1.05, result.bracket()
    assert all(p.stable == (p.rate <= result.low) for p in result.probes)
    assert result.low == max(p.rate for p in result.probes if p.stable)
    assert "slope" in result.rule


def test_paired_search_brackets_each_engine_as_a_solo_search_does() -> None:
    # 10 and 5 req/s engines, each on its own virtual clock: pairing changes no verdict.
    clocks = {"fast": VirtualClock(), "slow": VirtualClock()}
    engines = {"fast": FakeEngine(max_batch_size=1, base_s=0.1, clock=clocks["fast"]),
               "slow": FakeEngine(max_batch_size=1, base_s=0.2, clock=clocks["slow"])}
    results = capacity.search_many(
        RunContext(clocks=clocks), engines, _items(300, max_tokens=1),
        start_rates={"fast": 10.0, "slow": 5.0}, iterations=3)
    # Each bracket holds its engine's true rate (within the rule's 5% of growth).
    assert 8.0 <= results["fast"].low <= 10.5 and 10.0 <= results["fast"].high <= 12.0
    assert 4.0 <= results["slow"].low <= 5.25 and 5.0 <= results["slow"].high <= 6.0
    clock = VirtualClock()
    single = capacity.search(FakeEngine(max_batch_size=1, base_s=0.1, clock=clock),
                             _items(300, max_tokens=1), name="fast", start_rate=10.0,
                             iterations=3, clock=clock)
    assert [p.rate for p in single.probes] == [p.rate for p in results["fast"].probes]


class _SlowSpell(FakeEngine):
    """A FakeEngine whose first `spell` steps run 3x slower: a shared machine's bad moment."""

    def __init__(self, spell: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spell = spell

    def _spend(self, seconds: float) -> None:
        self.spell -= 1
        super()._spend(3 * seconds if self.spell >= 0 else seconds)


@pytest.mark.parametrize("retries", [0, 1])
def test_an_unstable_verdict_is_retried_before_it_counts(retries: int) -> None:
    # 10 req/s engine, probed at 8 req/s: a slow spell over the first probe fails it.
    clock = VirtualClock()
    engine = _SlowSpell(spell=150, max_batch_size=1, base_s=0.1, clock=clock)
    result = capacity.search(engine, _items(300, max_tokens=1), name="fake",
                             start_rate=8.0 / 1.2, iterations=0, max_expand=0, clock=clock,
                             retries=retries)
    first = result.probes[0]
    assert first.rate == pytest.approx(8.0) and not first.stable
    assert len(result.probes) == 1 + retries
    assert result.low == (pytest.approx(8.0) if retries else 0.0)


def test_a_retry_reruns_only_the_engines_that_failed() -> None:
    # Two 10 req/s engines at 8 req/s; a slow spell fails only the first engine's first
    # probe. The retry runs that engine again and not the one that passed: a rate passes if
    # any of its tries did, so a second try of a passing engine could change nothing (it
    # only cost time: on a busy machine nearly every round of three engines has one failing
    # engine, and re-running all of them doubled every round).
    clocks = {"spell": VirtualClock(), "steady": VirtualClock()}
    engines = {"spell": _SlowSpell(spell=150, max_batch_size=1, base_s=0.1,
                                   clock=clocks["spell"]),
               "steady": FakeEngine(max_batch_size=1, base_s=0.1, clock=clocks["steady"])}
    results = capacity.search_many(RunContext(clocks=clocks), engines, _items(300, max_tokens=1),
                                   start_rates=dict.fromkeys(engines, 8.0 / 1.2), iterations=0,
                                   max_expand=0, retries=1)
    assert [p.stable for p in results["spell"].probes] == [False, True]
    assert [p.stable for p in results["steady"].probes] == [True]
    assert results["spell"].low == results["steady"].low == pytest.approx(8.0)


def test_paired_runs_alternate_steps_and_keep_each_engines_time() -> None:
    log: list[str] = []
    clocks = {"a": VirtualClock(), "b": VirtualClock()}
    engines = {name: LoggedEngine(name, FakeEngine(max_batch_size=1, base_s=step_s,
                                                   clock=clocks[name]), log)
               for name, step_s in (("a", 0.1), ("b", 0.3))}
    trace = traces.closed(_items(2, max_tokens=3))
    runs = run_paired(engines, {"a": trace, "b": trace}, clocks=clocks)
    assert log == ["a", "b"] * 6
    # Each engine's run is timed on its own clock only: 6 steps of 0.1 s and of 0.3 s.
    assert runs["a"].wall_s == pytest.approx(0.6) and runs["b"].wall_s == pytest.approx(1.8)


def test_closed_runs_pair_engines_run_by_run() -> None:
    log: list[str] = []
    engines = {name: LoggedEngine(name, FakeEngine(max_batch_size=1, base_s=1e-4), log)
               for name in ("a", "b")}
    runs = RunContext().closed(engines, traces.closed(_items(1, max_tokens=2)), warmup=1, runs=2)
    assert [len(r) for r in runs.values()] == [2, 2]
    assert log == ["a", "b"] * 6  # 3 runs of 2 steps each, alternating step by step


def test_engine_clock_runs_only_between_resume_and_pause() -> None:
    clock = EngineClock()
    time.sleep(0.01)
    assert clock.now() == 0.0  # paused from the start
    before = time.perf_counter()
    clock.resume()
    time.sleep(0.01)
    clock.pause()
    after = time.perf_counter()
    ran = clock.now()
    time.sleep(0.01)
    # Between the sleep it slept and the span around resume..pause: the paused sleeps before
    # and after are not counted (bounds by the same clock, so no load can break them).
    assert 0.01 <= ran == clock.now() <= after - before
    clock.sleep_until(5.0)  # jumps, does not sleep
    assert clock.now() == 5.0


def test_disturbance_groups_spikes_by_admitted_prompt_length() -> None:
    clock = VirtualClock()
    engine = FakeEngine(max_batch_size=2, base_s=0.01, prefill_s_per_token=0.001, clock=clock)
    items = [*_items(1, prompt_len=10, max_tokens=30), *_items(1, prompt_len=50, max_tokens=3),
             *_items(1, prompt_len=200, max_tokens=3)]
    baseline, table = disturbance.spikes(run_trace(engine, traces.closed(items), clock=clock))
    assert baseline == pytest.approx(0.01)
    by_len = table.set_index("admitted_prompt_len")
    assert by_len.loc[200, "ratio"] == pytest.approx((0.01 + 0.2) / 0.01)
    assert disturbance.headline(table)["ratio"] == by_len.loc[200, "ratio"]
    # Every sample is the same exact gap on a virtual clock: the interval has no width.
    assert by_len.loc[200, "ci_low"] == pytest.approx(by_len.loc[200, "ci_high"])


def test_static_batching_has_no_admission_spike() -> None:
    clock = VirtualClock()
    engine = FakeEngine(max_batch_size=2, static=True, prefill_s_per_token=0.001, clock=clock)
    items = draws.mixed(8, max_model_len=128, vocab_size=100)
    _, table = disturbance.spikes(run_trace(engine, traces.closed(items), clock=clock))
    assert table.empty and math.isnan(disturbance.headline(table)["ratio"])


def test_cli_quick_writes_consistent_tables_and_plots(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    args = ["--quick", "--requests", "24", "--warmup", "0", "--runs", "2", "--iterations", "2",
            "--out", str(tmp_path), "--no-progress", "--slo-ttft", "0.01", "--slo-itl", "0.002",
            "--engine", "static=engines.bench.doubles.fake:static",
            "--engine", "continuous=engines.bench.doubles.fake:continuous"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    summary = pd.read_csv(tmp_path / "summary.csv").set_index("engine")
    probes = pd.read_csv(tmp_path / "probes.csv")
    assert list(summary.index) == ["static", "continuous"]
    ratio = summary.loc["continuous", "capacity_rps"] / summary.loc["static", "capacity_rps"]
    assert f"capacity ratio continuous/static: {ratio:.2f}x" in out
    assert "SLO: TTFT <= 10 ms and mean ITL <= 2 ms for >= 90% of requests (given)" in out
    assert "winner" in out.splitlines()[0]
    # --quick ties capacity and goodput within its searches' measured spread, and says so.
    assert (summary["search_tie"] == QUICK_SEARCH_TIE).all()
    assert f"capacity and goodput within {QUICK_SEARCH_TIE:g}x (--search-tie" in out
    # Targets given: no yardstick, so the host's drift over the reference run is not timed.
    assert "reference run: the host's speed over it was not timed" in out
    assert summary["reference_drift"].isna().all()
    for name, row in summary.iterrows():
        mine = probes[(probes["engine"] == name) & (probes["search"] == "capacity")]
        # Capacity is the bracket's low end: the highest stable rate probed, below every
        # rate that stayed unstable.
        assert row["capacity_rps"] < row["capacity_high_rps"]
        assert row["capacity_rps"] == pytest.approx(mine.loc[mine["stable"], "offered_rps"]
                                                    .max(), rel=1e-5)
        # Goodput needs stability too: its bracket lies inside capacity's.
        assert row["goodput_rps"] <= row["capacity_rps"]
        assert row["goodput_high_rps"] <= row["capacity_high_rps"]
        assert (row["slo_ttft_s"], row["slo_itl_s"], row["slo_attainment"]) == (0.01, 0.002, 0.9)
        # Latency columns at half the engine's own closed-batch request rate, re-timed just
        # before the reference run (on the wall clock, so a loaded machine moves it from the
        # closed stage's: test_the_reference_rate_is_retimed_just_before_the_reference_run).
        assert row["reference_rps"] == pytest.approx(
            Config().reference_load * row["reference_basis_rps"], rel=1e-4)
        assert row["reference_basis_rps"] > 0
        # summary.csv keeps 6 significant digits, the line 4: re-rounding the csv's value can
        # land on the other side of a half (610.85 read back gave 610.8, the line 610.9).
        said = re.search(rf"goodput {name}: ([0-9.e+-]+) req/s", out)
        assert said is not None and float(said[1]) == pytest.approx(row["goodput_rps"],
                                                                    rel=1e-3)
        assert row["output_tokens_per_s"] > 0 and row["driver_overhead_pct"] >= 0
        assert row["ttft_p50_s"] <= row["ttft_p95_s"] and row["itl_p50_s"] <= row["itl_p95_s"]
    # Static batching computes finished members until the batch drains; continuous never.
    assert summary.loc["static", "wasted_slot_steps"] > 0
    assert summary.loc["continuous", "wasted_slot_steps"] == 0
    # Continuous batching admits into a running batch, static batching never: only the one
    # has a spike. How large is a ratio of wall-clock sleeps, which a loaded machine
    # stretches (the virtual-clock tests of engines.bench.disturbance measure it exactly).
    assert summary.loc["continuous", "itl_spike_samples"] > 0
    assert np.isfinite(summary.loc["continuous", "itl_spike_ratio"])
    assert np.isnan(summary.loc["static", "itl_spike_ratio"])
    requests = pd.read_csv(tmp_path / "requests.csv")
    assert set(requests["engine"]) == {"static", "continuous"}
    assert requests.groupby(["engine", "run"]).size().min() > 0
    for name in ("tokens", "spikes", "closed"):
        assert len(pd.read_csv(tmp_path / f"{name}.csv")) > 0
    for png in ("rate", "goodput", "itl_timeline", "slot_timeline"):
        assert (tmp_path / f"{png}.png").stat().st_size > 0
    # One report per run, and everything renders from it: the saved report gives the same
    # closing text (table included) and the same summary.csv again.
    _renders_again(tmp_path, "summary.csv", out, capsys)


def _renders_again(out: Path, table_file: str, printed: str,
                   capsys: pytest.CaptureFixture[str]) -> None:
    """`render` of the run's saved report prints what the run printed and writes the same
    table CSV again."""
    from engines.bench import cli

    written = (out / table_file).read_text()
    (out / table_file).unlink()
    assert cli.main(["render", "--out", str(out), "--no-plots"]) == 0
    assert capsys.readouterr().out == printed
    assert (out / table_file).read_text() == written


FAKES = ("--engine", "static=engines.bench.doubles.fake:static",
         "--engine", "continuous=engines.bench.doubles.fake:continuous")


def test_closed_writes_a_report_that_renders_the_same_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    assert cli.main(["closed", "--no-hf", "--warmup", "0", "--runs", "2", "--no-progress",
                     "--out", str(tmp_path), *FAKES]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "closed.csv")
    assert list(table["engine"]) == ["static", "continuous"]
    assert printed.splitlines()[0].split()[:2] == ["engine", "output_tokens_per_s"]
    assert (table["min"] <= table["output_tokens_per_s"]).all()
    _renders_again(tmp_path, "closed.csv", printed, capsys)


def test_replay_writes_a_report_that_renders_the_same_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    assert cli.main(["replay", "--rates", "40,80", "--requests", "6", "--prompt-tokens", "4",
                     "--output-tokens", "3", "--no-progress", "--no-plots",
                     "--out", str(tmp_path), *FAKES]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "replay.csv")
    assert list(zip(table["engine"], table["offered_rps"], strict=True)) == [
        ("static", 40), ("static", 80), ("continuous", 40), ("continuous", 80)]
    assert (table["completed"] == 6).all()
    _renders_again(tmp_path, "replay.csv", printed, capsys)


def test_cli_names_a_bad_engine_spec(capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--engine", "mine=no_such_module_xyz:make", "--no-progress"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--engine 'no_such_module_xyz:make'" in err and "no_such_module_xyz" in err


@pytest.mark.parametrize(("flag", "value", "field"), [
    ("--slo-ttft", "-1", "slo_ttft_s"), ("--slo-attainment", "1.5", "slo_attainment"),
    ("--replicas", "0", "replicas"), ("--rate", "0", "reference_rps"),
    ("--retries", "-1", "retries"), ("--search-tie", "0.9", "search_tie")])
def test_cli_names_the_bad_value(flag: str, value: str, field: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main([flag, value, "--no-progress", "--engine", "engines.bench.doubles.fake:static"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{field}: must be" in err and f"got {float(value):g}" in err.replace(".0", "")


def test_every_run_is_summarized_once_for_every_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # The summary row, the CSV frames and asv's samples all read one summary per closed and
    # reference run, made where the run finished.
    from engines.bench import comparison, metrics, output
    from engines.bench.config import Config
    from engines.bench.doubles.fake import continuous, static

    summarized: list[int] = []
    original = metrics.summarize

    def counted(run: Any, **kwargs: Any) -> Any:
        summarized.append(id(run))
        return original(run, **kwargs)

    import sys

    from engines.bench import cli  # noqa: F401  (every module that might summarize)

    # Every bench module's `summarize` but the probes' (each probe's run is its own).
    for name, module in list(sys.modules.items()):
        if name.startswith("engines.bench.") and name != "engines.bench.probes" \
                and getattr(module, "summarize", None) is original:
            monkeypatch.setattr(module, "summarize", counted)
    config = Config(capacity_requests=16, warmup=0, runs=2, iterations=1, goodput_iterations=1,
                    slo_ttft_s=0.01, slo_itl_s=0.002, admissions_per_class=2)
    result = comparison.compare({"static": static, "continuous": continuous}, config)
    made = len(summarized)
    table = output.summary(result)
    output.tables(result)
    for engine in result.results.values():
        output.samples(engine)
    assert len(summarized) == made == len(set(summarized))  # none summarized again
    assert made == sum(len(e.closed) + len(e.reference_summaries)
                       for e in result.results.values())
    assert table["output_tokens_per_s"].gt(0).all()


def test_cli_retries_and_search_tie_reach_the_config() -> None:
    from engines.bench import cli

    def config(*argv: str) -> Config:
        return cli._config(cli._parser().parse_args([*argv, "--device", "cpu"]))

    assert (config("--clock", "wall").retries, config().search_tie) == (1, TIE)
    assert config("--quick").search_tie == QUICK_SEARCH_TIE
    given = config("--quick", "--retries", "2", "--search-tie", "1.1")
    assert (given.retries, given.search_tie) == (2, 1.1)
    # The cpu clock's default is one try (engines.bench.config); asked for, it retries.
    assert config("--clock", "cpu").retries == 0
    assert config("--clock", "steady").retries == 0
    assert config("--clock", "cpu", "--retries", "1").retries == 1


def _after_the_searches(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """`change` the modelled host once the goodput searches return (a tenant starts)."""
    searched = capacity.goodput_many

    def then_change(*args: Any, **kwargs: Any) -> Any:
        found = searched(*args, **kwargs)
        change()
        return found

    monkeypatch.setattr(capacity, "goodput_many", then_change)


class _RealCostTimer(FakeTimer):
    """A FakeTimer whose every timing also spins `spin_s` of real time: a machine on which
    the gauge's own Python is slow next to the fake engines' (a loaded CI runner)."""

    def __init__(self, spin_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spin_s = spin_s

    def _spin(self) -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < self.spin_s:
            pass

    def decode(self) -> float:
        self._spin()
        return super().decode()

    def prefill(self) -> float:
        self._spin()
        return super().prefill()


@pytest.mark.parametrize("gauge_spin_s", [0.0, 5e-4])
@pytest.mark.parametrize("clock", ["wall", "steady"])
def test_the_reference_rate_is_retimed_just_before_the_reference_run(
        clock: str, gauge_spin_s: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host slows 3x after the closed stage (another tenant starts during the searches).
    # Half the closed stage's rate would be 1.5x the slowed engine's capacity; the reference
    # run must run at half the rate the engine has now. On the steady clock, whose gauge
    # slows alike (the host's own speed: engines.bench.host.steady), the rate stays the quiet one,
    # and the output says how far the host's speed moved. The gauge keeps its share of the
    # time on the virtual clock too: were it the wall clock, a gauge slow in real time (a
    # loaded runner: spin) would skip turns, and the steady clock would see the slowdown late.
    from engines.bench import comparison, output
    from engines.bench.doubles.fake import Machine
    from engines.bench.host.steady import SteadyTime

    machine, virtual = Machine(), VirtualClock()
    engines: dict[str, Any] = {"continuous": FakeEngine(max_batch_size=4, base_s=0.005,
                                                        machine=machine, clock=virtual)}
    config = Config(capacity_requests=8, closed_requests=8, reference_requests=8, warmup=0,
                    runs=2, iterations=1, goodput_iterations=1, goodput_halvings=1,
                    slo_ttft_s=1.0, slo_itl_s=1.0, admissions_per_class=1, clock=clock,
                    host=True)
    # The fake spends a virtual clock, which the engines' clock (and the steady clock's raw
    # one) reads: every rate is exact, whatever the machine running the test does. One
    # gauge: the kit's.
    gauge = _RealCostTimer(gauge_spin_s, step_s=0.001, machine=machine)
    steady = SteadyTime(gauge, raw=virtual.now, window=3,
                        settle_turns=4) if clock == "steady" else None
    _after_the_searches(monkeypatch, lambda: setattr(machine, "factor", 3.0))
    found = comparison.run(engines, config, timer=gauge, steady=steady,
                           time_source=virtual.now)
    result = found.results["continuous"]
    quiet_rps = np.median([len(r.trace) / r.wall_s for r in result.closed])
    (basis,) = result.reference_basis_rps
    text = output.report(found).text()
    if steady is None:
        assert basis == pytest.approx(quiet_rps / 3)
        assert found.host_speed is None and "every figure is at the speed" not in text
    else:
        # Rescaled by the host's speed, which the gauge saw slow down 3x: the quiet rate
        # (the median of the re-timing runs: the first began before the gauge's window had
        # seen the slowdown).
        assert basis == pytest.approx(quiet_rps)
        assert steady.settled and found.host_speed == pytest.approx((1.0, 3.0))
        assert "and 1.00-3.00x that over the run: every figure is at the speed of" in text
    assert result.reference is not None
    assert result.reference.trace.rate == pytest.approx(config.reference_load * basis)


@pytest.mark.parametrize("slowdown", [1.0, 2.0])
def test_the_reference_run_says_when_the_host_moved_under_it(
        slowdown: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # The kit's gauge takes turns during the re-timing and the run; a host that slows down
    # between them (another tenant starts) is measured and named in the closing text.
    from engines.bench import reference
    from engines.bench.doubles.fake import FakeTimer, Machine
    from engines.bench.host import lines
    from engines.bench.host.gauge import HostGauge
    from engines.bench.progress import Progress

    machine = Machine()
    engines: dict[str, Any] = {"continuous": FakeEngine(max_batch_size=4, base_s=0.001,
                                                        machine=machine)}
    yardstick = HostGauge(FakeTimer(step_s=0.01, machine=machine))
    replay = traces.poisson

    def slowed_down(*args: Any, **kwargs: Any) -> Any:
        machine.factor = slowdown  # from the reference run's start: the re-timing was quiet
        return replay(*args, **kwargs)

    monkeypatch.setattr(traces, "poisson", slowed_down)
    closed = traces.closed(draws.uniform(4, prompt_len=4, max_tokens=3, vocab_size=100))
    items = draws.uniform(6, prompt_len=4, max_tokens=3, vocab_size=100)
    bar = Progress(False)
    config = Config(host=True)
    bar.stage("reference run", reference.stages(config))
    found = reference.run_reference(RunContext(bar=bar, hook=yardstick.turn), engines, closed,
                                    items, config, replica=0, closed={"continuous": 1.0},
                                    gauge=yardstick)
    assert found.drift == pytest.approx(slowdown)
    line = lines.drift_line([found.drift])
    assert f"took {slowdown:.2f}x as long" in line
    assert ("the host's speed moved under it" in line) == (slowdown > lines.DRIFT_WARNING)
    # Rates re-timed before the slowdown: half the quiet closed rate.
    assert found.runs["continuous"].trace.rate == pytest.approx(
        0.5 * found.basis_rps["continuous"], rel=1e-4)


@pytest.mark.parametrize("paired", [True, False])
def test_the_spikes_are_stated_beside_the_hosts_own_prefill_over_decode(
        paired: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a VM the host's prefill and decode speeds move apart between runs, and an admission
    # spike (an admitting step over a decode step) moves with them. The SLO yardstick takes
    # turns between the disturbance run's steps, and the output states its ratio over those
    # steps: here the host's prefills turn 2.5x dearer after the searches, which the median
    # round (the SLO's) does not show. Given targets: no yardstick, no line.
    from engines.bench import comparison, output
    from engines.bench.doubles.fake import FakeTimer

    timer = FakeTimer(step_s=0.001, prefill_s=0.002, batch=4, prompt_len=30)
    virtual = VirtualClock()
    engines: dict[str, Any] = {
        "static": FakeEngine(max_batch_size=4, static=True, base_s=0.0005, clock=virtual),
        "continuous": FakeEngine(max_batch_size=4, base_s=0.0005, prefill_s_per_token=2e-5,
                                 clock=virtual)}
    given = None if paired else 1.0
    config = Config(capacity_requests=8, closed_requests=8, reference_requests=8, warmup=0,
                    runs=1, iterations=1, goodput_iterations=1, goodput_halvings=1,
                    admissions_per_class=1, slo_ttft_s=given, slo_itl_s=given,
                    host=paired)
    _after_the_searches(monkeypatch, lambda: setattr(timer, "prefill_s", 0.005))
    found = comparison.run(engines, config, timer=timer, time_source=virtual.now)
    text = output.report(found).text()
    column = output.summary(found)["spike_host_prefill_x"]
    if not paired:
        assert found.disturbance_times is None and timer.calls == 0
        assert column.isna().all() and "the host's own ratio" not in text
        return
    assert found.hardware is not None and found.disturbance_times is not None
    assert found.hardware.prefill_over_decode() == pytest.approx(2.0)
    assert found.disturbance_times.prefill_over_decode() == pytest.approx(5.0)
    decodes, prefills = found.disturbance_times.samples
    # Turns between the steps, not only the top-up to the minimum a round takes.
    assert decodes + prefills > MIN_DECODES + MIN_PREFILLS
    assert "30-token prefill took 5x its 4-row decode step" in text
    assert "the host's own ratio, which a spike moves with" in text
    assert column.to_list() == pytest.approx([5.0, 5.0])


def test_a_given_reference_rate_is_not_retimed_and_has_no_drift() -> None:
    # --rate: no re-timing, so nothing to compare the run's timings with; no round is taken.
    from engines.bench import reference
    from engines.bench.doubles.fake import FakeTimer
    from engines.bench.host.gauge import HostGauge
    from engines.bench.progress import Progress

    timer = FakeTimer(step_s=0.01)
    config = Config(reference_rps=50.0, host=True)
    bar = Progress(False)
    bar.stage("reference run", reference.stages(config))
    closed = traces.closed(draws.uniform(4, prompt_len=4, max_tokens=3, vocab_size=100))
    found = reference.run_reference(
        RunContext(bar=bar), {"continuous": FakeEngine(max_batch_size=4, base_s=0.001)},
        closed, draws.uniform(6, prompt_len=4, max_tokens=3, vocab_size=100), config,
        replica=0, closed={"continuous": 1.0}, gauge=HostGauge(timer))
    assert math.isnan(found.drift) and timer.calls == 0
    assert found.runs["continuous"].trace.rate == pytest.approx(50.0)
