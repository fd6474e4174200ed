"""liveness: the property on hand-built traces (every request finishes, an abort within a
step, no output for a request never given), its planted bugs caught (a leak across
workloads replayed from the engine's history; a full prefix hit that hangs, which only one
seed workload reaches), a correct engine and a multi-token one passing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engines.protocol import FinishReason, StepOutput
from engines.testing.checks import check_named
from engines.testing.context import SuiteContext
from engines.testing.verdict import verify
from engines.testing.workload import Abort
from tests.helpers import GOOD, JUDGE, MULTI_TOKEN, Steps, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, TOY, name_of, planted
from tests.planted.harness import hunt, pinned
from tests.planted.revisit_bugs import FullHitComputesNothing
from tests.planted.seed_reach import AGAIN, seed_context, split
from tests.planted.toy_bugs import PLANTED, LeaksBlockPerRequest

CHECK = "liveness"
check_liveness = check_named(CHECK)
L, A = FinishReason.LENGTH, FinishReason.ABORT


def test_liveness() -> None:
    check_liveness(trace(GOOD), JUDGE)
    fails(check_liveness, trace(GOOD[:2], stalled=True), "request 'r0' .* had not finished")
    stray: Steps = [[*GOOD[0], ("ghost", (1,), None)], *GOOD[1:]]
    t = trace(stray)
    t.stray.append((0, StepOutput("ghost", (1,), None)))
    fails(check_liveness, t, "'ghost', which the engine was never given")


def test_liveness_wants_an_abort_to_end_the_request_within_a_step() -> None:
    prompt: Steps = [[("r0", (5,), None), ("r1", (8,), None)], [("r0", (), A), ("r1", (9,), L)]]
    check_liveness(trace(prompt, aborts=(Abort(0, "r0"),)), JUDGE)
    slow: Steps = [*prompt[:1], [("r1", (9,), L)], [("r0", (), A)]]
    fails(check_liveness, trace(slow, aborts=(Abort(0, "r0"),)), "only finished in step 2")


def test_multi_token_steps_pass() -> None:
    check_liveness(trace(MULTI_TOKEN), JUDGE)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


def test_a_leak_across_workloads_is_replayed_from_the_engines_history() -> None:
    """LeaksBlockPerRequest fails only on an engine that served earlier workloads: the report
    carries the earlier workloads it needs, shrunk, and its script shows the stuck request."""
    caught = hunt(LeaksBlockPerRequest, seeds=False)
    assert caught is not None and caught.prop == "liveness", str(caught)
    text = str(caught)
    assert "passed on a fresh engine but failed on one that had served" in text
    # The diagnosis is the replays': the history reproduces it, the workload alone does not.
    assert re.search(r"after the earlier workload\(s\) it reproduced [1-9]\d* of \d+; the "
                     r"workload alone, 0 of \d+\.", text), text
    assert "So it needs the engine's history: state leaks across requests." in text
    stuck = text.split("unfinished: ", 1)[1].split("]", 1)[0]
    script = expect.script_of(text)
    assert "# earlier workload 1 of" in script and "request_id='w1.r0'" in script
    out = expect.run_script(script)  # judged by liveness: it exits 1
    assert any(line.startswith("liveness: ") for line in out), out
    steps = "\n".join(line for line in out if line.startswith("step "))
    for rid in stuck.strip("[]").replace("'", "").split(", "):
        assert f"{rid} [" not in steps  # never served


def test_a_leak_found_by_the_seed_workloads_is_reported() -> None:
    """The seed workloads alone (no Hypothesis examples) run the same engine in turn: a leak
    they expose is reported, not dropped."""
    caught = hunt(LeaksBlockPerRequest, settings=expect.SEEDS_ONLY)
    assert caught is not None and caught.prop == "liveness", str(caught)
    assert "passed on a fresh engine but failed on one that had served" in str(caught)


@pytest.fixture(scope="module")
def full_hit() -> SuiteContext:
    return seed_context(FullHitComputesNothing)


def test_a_full_prefix_hit_that_hangs_is_reported_by_liveness(full_hit: SuiteContext) -> None:
    (again,), _ = split(full_hit, AGAIN)
    block = full_hit.limits.block
    assert [len(r.prompt_token_ids) for r in again.requests] == [block - 1, block, block + 1,
                                                                  2 * block] * 2
    outcome = verify(full_hit, again, FullHitComputesNothing.caught_by)
    assert outcome.failure is not None
    text = str(outcome.failure.error)
    assert "had not finished after" in text and "(the bound for this workload)" in text, text


def test_no_other_seed_workload_reaches_the_full_hit_bug(full_hit: SuiteContext) -> None:
    _, others = split(full_hit, AGAIN)
    failed = [w.label for w in others
              if not verify(full_hit, w, FullHitComputesNothing.caught_by).ok]
    assert not failed, failed


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)
