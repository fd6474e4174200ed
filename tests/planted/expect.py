"""What the tests of each check (tests/testing/checks/test_<check>.py) assert of a hunt on a
planted bug or a correct engine, written once: each check's file picks its own bugs
(tests.planted.catalog.planted) and calls these, so no bug is hunted in two files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import Phase
from hypothesis import settings as Settings

from engines.protocol import Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.testing.checks import check_named
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from engines.testing.stateful import run_engine_machine
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted.harness import (
    check_of,
    context_of,
    hunt,
    hunt_in_subprocess,
    pinned,
)
from tests.planted.multitoken import MultiTokenSteps
from tests.planted.spec_bugs import SpeculatingControl

__all__ = ["SEEDS_ONLY", "a_multi_token_engine_passes", "caught_by_seed_workloads",
           "caught_by_the_hard_case", "caught_by_the_hard_case_not_its_control",
           "caught_by_the_search", "caught_in_a_fresh_process", "caught_with_a_script",
           "found_by_the_search_alone", "not_everywhere", "passes", "passes_beside_the_reference",
           "run_script", "script_of", "SPEC_EXAMPLES", "a_speculation_bug_is_caught",
           "the_speculating_control_passes"]

ROOT = Path(__file__).resolve().parents[2]
# The seed workloads alone, no drawn example: what the real (slower) engines' bugs must meet.
SEEDS_ONLY = Settings(max_examples=1, phases=[Phase.explicit])


def script_of(report: str) -> str:
    """The runnable script a finding's report ends with."""
    return report.split("as a runnable script:\n\n", 1)[1]


def run_script(script: str, *, exits: int = 1) -> list[str]:
    """The script's printed lines, run as a user would run it with --steps (every step's
    outputs, then its verdict); it must exit `exits` (1: the bug is there)."""
    proc = subprocess.run([sys.executable, "-c", script, "--steps"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == exits, proc.stdout + proc.stderr
    return (proc.stdout + proc.stderr).splitlines()


def caught_with_a_script(bug: Any) -> None:
    """The whole search (seed workloads, then drawn ones) catches a toy engine's bug by the
    check meant for it, and the report names that check and ends with a script that builds
    the engine and judges the workload by that check (tests/testing/test_rerun.py runs such
    scripts)."""
    caught = hunt(bug)
    assert caught is not None, f"{bug.__name__} was not caught by {check_of(bug)}"
    assert caught.prop == bug.caught_by, str(caught)
    text = str(caught)
    assert text.startswith(f"{bug.caught_by}: "), text
    script = script_of(text)
    assert "as make_engine" in script and f"main({caught.prop!r}, workload, make_engine" \
        in script, script


def found_by_the_search_alone(bug: Any, examples: int = 150) -> None:
    """Without the hand-picked seed workloads, the derandomized Hypothesis search finds the
    bug too (a verdict must not be luck)."""
    caught = hunt(bug, seeds=False, settings=pinned(examples, shrink=False))
    assert caught is not None and caught.prop == bug.caught_by, str(caught)


def not_everywhere(bug: Any) -> None:
    """A lone short request passes: the bug needs a particular mix or arrival order."""
    lone = Workload((Request((1, 2, 3), SamplingParams(max_tokens=3), request_id="r0"),), (0,))
    assert verify(context_of(bug), lone, check_of(bug)).ok


def caught_by_seed_workloads(bug: Any) -> None:
    """The seed workloads alone catch the bug, by the check meant for its class, with a
    runnable script (real engines are slower: no drawn example is needed)."""
    caught = hunt(bug, settings=SEEDS_ONLY)
    assert caught is not None and caught.prop == bug.caught_by, str(caught)
    assert "as a runnable script" in str(caught)


def caught_by_the_hard_case(bug: Any, label: str, ctx: SuiteContext | None = None) -> None:
    """The seed workload of the bug's check whose label holds `label` (a feature's hard
    case, issue 52) fails the bug's engine by the check meant for it, on a fresh engine: the
    default profile reaches it every run, whatever the Hypothesis seed. (A hunt through every
    seed workload may catch the bug elsewhere first; this names the case that always does.)"""
    ctx = ctx or context_of(bug)
    check = check_of(bug)
    seeds = seed_workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)
    found = [w for w in seeds if label in w.label]
    assert found, f"no seed workload of {check} is labelled {label!r}: {[w.label for w in seeds]}"
    outcomes = [verify(ctx, w, check) for w in found]
    failures = [o.failure.error for o in outcomes if o.failure is not None]
    assert failures, f"{bug.__name__}: the {label!r} seed workload passed {check}"
    assert any(str(e).startswith(f"{bug.caught_by}: ") for e in failures), str(failures[0])


def caught_by_the_hard_case_not_its_control(bug: Any, control: Any, check: str, label: str,
                                            contexts: Any = context_of) -> None:
    """Features drawn together (issue 51): the seed workloads of `check` labelled `label`
    (run before any draw, whatever the Hypothesis seed) fail the planted bug by `check`, and
    the correct engine it is planted in (`control`) passes the same workloads. `contexts`
    makes each engine's context (adapters: tests.planted.tenants.lora_context)."""
    ctx = contexts(bug)
    found = [w for w in seed_workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)
             if label in w.label]
    assert found, f"no seed workload of {check} is labelled {label!r}"
    failures = [o.failure.error for w in found
                if (o := verify(ctx, w, check)).failure is not None]
    assert failures, f"{bug.__name__}: the {label!r} seed workload passed {check}"
    assert all(str(e).startswith(f"{check}: ") for e in failures), str(failures[0])
    correct = contexts(control)
    for w in found:
        outcome = verify(correct, w, check)
        assert outcome.ok, str(outcome.failure.error if outcome.failure else w.label)[:2000]


def caught_by_the_search(bug: Any, examples: int) -> None:
    """Seed workloads then `examples` derandomized drawn ones catch the bug by its check,
    with a runnable script (for bugs the seed workloads hold nothing for)."""
    caught = hunt(bug, settings=pinned(examples))
    assert caught is not None and caught.prop == bug.caught_by, str(caught)
    assert "as a runnable script" in str(caught)


def caught_in_a_fresh_process(bug: Any, examples: int = 60, *, seeds: bool = True,
                              script: bool = True) -> None:
    """hunt_in_subprocess: for the hunts whose verdict moved with what earlier tests left in a
    long pytest worker (see its docstring)."""
    prop, report = hunt_in_subprocess(bug, examples, seeds=seeds)
    assert prop is not None, f"{bug.__name__} was not caught by {check_of(bug)}"
    assert prop == bug.caught_by, report
    if script:
        assert "as a runnable script" in report


def passes(engine: Any, check: str, settings: Settings, ctx: SuiteContext | None = None
           ) -> None:
    """No false alarm: a correct engine (in `ctx`, else its own context) passes the check
    under derandomized settings (the state machine's check runs the machine)."""
    ctx = ctx or context_of(engine)
    if check_named(check).runs == "machine":
        run_engine_machine(ctx, settings=settings)
    else:
        found = hunt(engine, settings=settings, ctx=ctx, check=check)
        assert found is None, str(found)[:2000]


def passes_beside_the_reference(engine: Any, check: str, settings: Settings,
                                name: str) -> None:
    """passes(), in a context that compares the engine with the sequential reference engine
    (an engine a bug was planted in: no false alarm from the checks that catch it)."""
    ctx = build_context(engine, name=name,
                        spec=f"{engine.__module__}:{engine.__name__}",
                        options=SuiteOptions(reference=SequentialEngine))
    passes(engine, check, settings, ctx)


def a_multi_token_engine_passes(check: str) -> None:
    """No false alarm on an engine whose steps carry several tokens a row (a speculating
    engine's), in a check whose bookkeeping counts tokens."""
    ctx = build_context(MultiTokenSteps, name="multi",
                        spec=f"{MultiTokenSteps.__module__}:MultiTokenSteps")
    passes(MultiTokenSteps, check, pinned(15, shrink=False), ctx)


# Drawn workloads a search runs on a speculation bug (tests/planted/spec_bugs.py): each is
# found within the first 10 (measured: every one within 30-60 s on a loaded 2-core machine,
# without shrinking).
SPEC_EXAMPLES = 10


def a_speculation_bug_is_caught(bug: Any) -> None:
    """A derandomized search of drawn workloads, no seed workloads needed, in a fresh
    interpreter: under `pytest -n auto` in CI, IgnoresStopInRun went uncaught in a long worker
    (caught in every fresh process, under any hash seed), as two beam and children hunts did
    before."""
    caught_in_a_fresh_process(bug, SPEC_EXAMPLES, seeds=False, script=False)


def the_speculating_control_passes(check: str) -> None:
    """The correct speculating engine, configured as the bugs' engine is, passes the same
    check under the same search."""
    passes(SpeculatingControl, check, pinned(SPEC_EXAMPLES, shrink=False))
