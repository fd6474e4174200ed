"""The suite proves its bite: every planted bug is caught, by the check meant to catch it (the
report's label is compared with `caught_by`), with a small counterexample whose script really
shows the symptom; and a whole `--pyargs` run on a buggy engine fails the right test."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase
from hypothesis import settings as Settings

from engines.protocol import Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.testing.checks import (
    BEAMS,
    CHILDREN,
    KV,
    REFERENCE,
    STOP_STRINGS,
    TOKENIZER,
    VARIANTS,
    catalogue,
    check_named,
)
from engines.testing.context import SuiteOptions, build_context
from engines.testing.stateful import run_engine_machine
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted.catalog import ALL_CONTROLS
from tests.planted.continuous_bugs import CONTINUOUS_PLANTED
from tests.planted.crash_bugs import CRASH_PLANTED
from tests.planted.edge_bugs import EDGE_PLANTED
from tests.planted.harness import check_of, context_of, hunt, pinned
from tests.planted.model_bugs import MODEL_PLANTED
from tests.planted.paged_bugs import (
    PAGED_PLANTED,
    ResumeKeepsOldBlockIds,
    resume_keeps_old_block_ids_eight_seats,
)
from tests.planted.sampling_bugs import SAMPLING_PLANTED
from tests.planted.toy_bugs import PLANTED, CompactionHole, LeaksBlockPerRequest

TOY = [*PLANTED, *EDGE_PLANTED, *CRASH_PLANTED]  # cheap engines: the whole search runs on each

ROOT = Path(__file__).resolve().parents[2]


def _script(text: str) -> str:
    return text.split("as a runnable script:\n\n", 1)[1]


def _run(script: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True).stdout.splitlines()


@pytest.mark.parametrize("bug", TOY, ids=lambda b: b.__name__)
def test_suite_catches_planted_bug(bug: Any) -> None:
    caught = hunt(bug)
    assert caught is not None, f"{bug.__name__} was not caught by {check_of(bug)}"
    assert caught.prop == bug.caught_by, str(caught)
    text = str(caught)
    assert text.startswith(f"{bug.caught_by}: "), text
    assert "engine = make_engine()" in _script(text)


@pytest.mark.parametrize("bug", TOY, ids=lambda b: b.__name__)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    """Without the hand-picked seed workloads, the Hypothesis search finds each bug too."""
    caught = hunt(bug, seeds=False, settings=pinned(shrink=False))
    assert caught is not None and caught.prop == bug.caught_by, str(caught)


@pytest.mark.parametrize("bug", [*PLANTED, *CRASH_PLANTED], ids=lambda b: b.__name__)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    """A lone short request passes: each bug needs a particular mix or arrival order."""
    lone = Workload((Request((1, 2, 3), SamplingParams(max_tokens=3), request_id="r0"),), (0,))
    assert verify(context_of(bug), lone, check_of(bug)).ok


@pytest.mark.parametrize("bug", [*CONTINUOUS_PLANTED, *MODEL_PLANTED, *PAGED_PLANTED],
                         ids=lambda b: b.__name__)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    """Real engines are slower: the seed workloads alone must catch these."""
    seeds_only = Settings(max_examples=1, phases=[Phase.explicit])
    caught = hunt(bug, settings=seeds_only)
    assert caught is not None and caught.prop == bug.caught_by, str(caught)
    assert "as a runnable script" in str(caught)


def test_only_the_default_engines_preemption_catches_a_resume_bug() -> None:
    """ResumeKeepsOldBlockIds is caught above on the default configuration (16 seats sharing
    8 whole contexts). On 8 seats of a whole context each (the default before) nothing
    preempts: the seed workloads and drawn ones pass the same bug."""
    make = resume_keeps_old_block_ids_eight_seats
    ctx = build_context(make, name=make.__name__, spec=f"{make.__module__}:{make.__name__}",
                        options=SuiteOptions(reference=SequentialEngine))
    assert ctx.limits.pool_overflows is False
    caught = hunt(ResumeKeepsOldBlockIds, settings=pinned(4, shrink=False), ctx=ctx)
    assert caught is None, str(caught)


@pytest.mark.parametrize("bug", SAMPLING_PLANTED, ids=lambda b: b.__name__)
def test_suite_catches_per_row_sampling_bugs(bug: Any) -> None:
    """The seed workloads hold no logits processing: the search must find these, each by the
    check meant for its class (derandomized, so the verdict is not luck)."""
    caught = hunt(bug, settings=pinned(150))  # most are caught in the first 10-30 examples
    assert caught is not None and caught.prop == bug.caught_by, str(caught)
    assert "as a runnable script" in str(caught)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("check", [c.name for c in catalogue()
                                   if not {REFERENCE, VARIANTS, KV, TOKENIZER, STOP_STRINGS,
                                            CHILDREN, BEAMS} & set(c.needs)])
def test_a_correct_engine_passes_every_check(control: Any, check: str) -> None:
    """No false alarm: the control engines pass every check that applies to them, under
    more derandomized examples than the dev profile draws (the retire-at-start control once
    failed bad_input one seed in six, blamed for a has_work() that was already True before a
    refusal). The 20-seed sweeps in the closing notes go further."""
    ctx = context_of(control)
    if check_named(check).runs == "machine":
        run_engine_machine(ctx, settings=pinned(30))
    else:
        hunt_result = hunt(control, settings=pinned(30), ctx=ctx, check=check)
        assert hunt_result is None, str(hunt_result)


@pytest.mark.parametrize("bug", CRASH_PLANTED, ids=lambda b: b.__name__)
def test_a_crash_is_reported_with_a_script_that_raises_it(bug: Any) -> None:
    """A planted bug that raises reads as a finding: the call, the step and the exception in
    the first line, then the requests in flight and the engine's own frames (none of the
    suite's); and the script, run as it stands, raises the same exception in the same call."""
    caught = hunt(bug)
    assert caught is not None and caught.prop == "crash", str(caught)
    text = str(caught)
    head = text.splitlines()[0]
    assert head.startswith("crash: the engine raised IndexError in "), head
    call = head.split(" in ", 1)[1].split(" at step ")[0]
    assert call.startswith(("step()", "add_request(")), head
    assert "In flight: " in text
    frames = text.split("the suite's frames hidden):\n", 1)[1].split("\n\n", 1)[0]
    assert "crash_bugs.py" in frames and "engines/testing" not in frames, frames
    proc = subprocess.run([sys.executable, "-c", _script(text)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == frames.splitlines()[-1], proc.stderr
    assert f"in {call.split('(')[0]}\n" in proc.stderr  # the same protocol method raised


def test_repro_script_shows_the_hole_in_the_slot_table() -> None:
    """The printed script runs as it stands, and its printed slot tables show the bug: a free
    slot below an occupied one."""
    caught = hunt(CompactionHole)
    assert caught is not None
    tables = [ast.literal_eval(line.split("slots", 1)[1].strip())
              for line in _run(_script(str(caught))) if line.startswith("  slots")]
    holes = [t for t in tables
             if any(x is None and y is not None for x, y in zip(t, t[1:], strict=False))]
    assert tables and holes, tables


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
    script = _script(text)
    assert "# earlier workload 1 of" in script and "request_id='w1.r0'" in script
    out = [line for line in _run(script) if not line.startswith("  slots")]
    assert out[-1].endswith("True")  # the failing workload's bound ran out with work left
    for rid in stuck.strip("[]").replace("'", "").split(", "):
        assert f"request_id='{rid}'" not in "\n".join(out)  # never served


def test_a_leak_found_by_the_seed_workloads_is_reported() -> None:
    """The seed workloads alone (no Hypothesis examples) run the same engine in turn: a leak
    they expose is reported, not dropped."""
    caught = hunt(LeaksBlockPerRequest, settings=Settings(max_examples=1,
                                                           phases=[Phase.explicit]))
    assert caught is not None and caught.prop == "liveness", str(caught)
    assert "passed on a fresh engine but failed on one that had served" in str(caught)


def test_pyargs_run_on_a_buggy_engine_fails_the_right_test() -> None:
    spec = "tests.planted.toy_bugs:AbortLeaksSlot"
    proc = subprocess.run(
        # --noconftest: the repo's conftests import torch, which this engine never needs.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q",
         "--hypothesis-profile=batching-dev", "-rA", "--pyargs",
         "engines.testing.conformance", "--engine", spec, "-k", "zero_waste or parity"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED engines/testing/conformance.py::test_conformance[AbortLeaksSlot-zero_waste]" \
        in proc.stdout, proc.stdout
    assert "PASSED engines/testing/conformance.py::test_conformance[AbortLeaksSlot-parity]" \
        in proc.stdout, proc.stdout
