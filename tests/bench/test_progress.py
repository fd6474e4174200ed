"""Progress: every stage of a comparison has a total (so tqdm shows an ETA) and ends at it."""

from __future__ import annotations

import pytest

from engines.bench import capacity, comparison
from engines.bench.config import Config
from engines.bench.doubles.fake import FakeEngine, FakeTimer
from engines.bench.progress import Progress
from engines.protocol import Engine


def test_a_stage_bar_shows_its_total_and_an_eta(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    bar = Progress(True)
    bar.stage("capacity rounds", 4, unit="round")
    bar.tick(postfix={"static": "31.3"})
    bar.tick()
    bar.close()
    err = capsys.readouterr().err
    assert "capacity rounds" in err and "2/4" in err
    assert "<" in err  # tqdm's [elapsed<remaining]: an ETA, which a bar without a total lacks


def test_ticks_past_the_plan_grow_the_total_and_an_early_end_cuts_it() -> None:
    bar = Progress(False)
    bar.stage("goodput rounds", 2)
    for _ in range(3):
        bar.tick()
    assert (bar.stages[-1].planned, bar.stages[-1].total, bar.stages[-1].done) == (2, 3, 3)
    bar.stage("capacity rounds", 5)
    bar.tick()
    bar.finish()
    assert (bar.stages[-1].total, bar.stages[-1].done) == (1, 1)
    with pytest.raises(ValueError, match="total must be >= 1"):
        bar.stage("nothing", 0)


def test_every_stage_of_a_comparison_has_a_total_and_reaches_it() -> None:
    config = Config(capacity_requests=24, closed_requests=8, warmup=0, runs=2, iterations=2,
                    goodput_iterations=1, admissions_per_class=2, max_batch_size=4)
    engines: dict[str, Engine] = {
        "static": FakeEngine(static=True, base_s=2e-4, prefill_s_per_token=2e-6),
        "continuous": FakeEngine(base_s=2e-4, prefill_s_per_token=2e-6)}
    bar = Progress(False)
    result = comparison.run(engines, config, bar=bar,
                            timer=FakeTimer(step_s=1e-3, prefill_s=5e-3))
    names = [s.text for s in bar.stages]
    assert names == ["closed runs", "capacity rounds (replica 1/1)",
                     "goodput rounds (replica 1/1)", "reference run (replica 1/1)",
                     "admission disturbance, slot timeline"]
    for stage in bar.stages:
        assert stage.planned >= 1 and stage.done == stage.total, stage
    assert bar.stages[0].planned == config.warmup + config.runs
    assert bar.stages[1].planned == capacity.planned_rounds(config.iterations, config.retries)
    # A search's bar counts its rounds, retries included: one tick per paired round.
    first = result.results["static"]
    assert bar.stages[1].done >= max(len(r.capacity.probes) for r in result.results.values())
    assert bar.stages[2].done >= len(first.goodput.probes)
