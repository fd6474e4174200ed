"""The suite proves its bite: every planted bug is caught, by the property meant to catch it,
with a small counterexample; and a whole `--pyargs` run on a buggy engine exits with 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase

from engines.testing.properties import Violation
from engines.testing.suite import Suite
from tests.planted.continuous_bugs import CONTINUOUS_PLANTED
from tests.planted.toy_bugs import PLANTED, LeaksBlockPerRequest

ROOT = Path(__file__).resolve().parents[1]


def suite_for(bug: Any, *, seeds: bool = True) -> Suite:
    suite = Suite(bug, name=bug.__name__, spec=f"tests.planted.toy_bugs:{bug.__name__}")
    suite.use_seeds = seeds
    # Pinned, whatever the profile: the verdict must not depend on luck.
    suite.overrides = {"max_examples": 150, "derandomize": True, "database": None}
    if not seeds:
        suite.overrides["phases"] = [Phase.generate]  # the first failure is proof enough
    return suite


@pytest.mark.parametrize("bug", PLANTED, ids=lambda b: b.__name__)
def test_suite_catches_planted_bug(bug: Any) -> None:
    with pytest.raises(Violation) as caught:
        suite_for(bug).check(bug.caught_by)
    text = str(caught.value)
    assert text.startswith(f"{bug.caught_by}: "), text
    assert "as a runnable script" in text and "engine = make_engine()" in text


@pytest.mark.parametrize("bug", PLANTED, ids=lambda b: b.__name__)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    """Without the hand-picked seed workloads, the Hypothesis search finds each bug too."""
    with pytest.raises(Violation, match=f"^{bug.caught_by}: "):
        suite_for(bug, seeds=False).check(bug.caught_by)


@pytest.mark.parametrize("bug", PLANTED, ids=lambda b: b.__name__)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    """A lone short request passes: each bug needs a particular mix or arrival order."""
    suite = suite_for(bug)
    suite.prepare()
    from engines.protocol import Request, SamplingParams
    from engines.testing.workload import Workload

    lone = Workload((Request((1, 2, 3), SamplingParams(max_tokens=3), request_id="r0"),), (0,))
    suite.verify(lone, bug.caught_by)


@pytest.mark.parametrize("bug", CONTINUOUS_PLANTED, ids=lambda b: b.__name__)
def test_suite_catches_bugs_planted_in_the_reference_engine(bug: Any) -> None:
    suite = Suite(bug, name=bug.__name__)
    suite.overrides = {"max_examples": 1, "phases": [Phase.explicit]}  # seeds suffice
    with pytest.raises(Violation, match="as a runnable script"):
        suite.check(bug.caught_by)


def test_repro_snippet_reproduces() -> None:
    """The printed script runs as it stands and shows the bug's symptom."""
    with pytest.raises(Violation) as caught:
        suite_for(PLANTED[1]).check("compaction")  # CompactionHole
    script = str(caught.value).split("as a runnable script:\n\n", 1)[1]
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "None" in out and "step" not in out.splitlines()[0]


def test_a_leak_across_workloads_is_replayed_from_the_engines_history() -> None:
    """LeaksBlockPerRequest fails only on an engine that served earlier workloads: the report
    carries the earlier workloads it needs, shrunk, and its script shows the stuck request."""
    with pytest.raises(Violation) as caught:
        suite_for(LeaksBlockPerRequest, seeds=False).check("liveness")
    text = str(caught.value)
    assert "passes on a fresh engine but fails on one that has served" in text
    stuck = text.split("unfinished: ", 1)[1].split("]", 1)[0]
    script = text.split("as a runnable script:\n\n", 1)[1]
    assert "# earlier workload 1 of" in script and "request_id='w1.r0'" in script
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    assert out[-1].endswith("True")  # the failing workload's bound ran out with work left
    for rid in stuck.strip("[]").replace("'", "").split(", "):
        assert f"request_id='{rid}'" not in "\n".join(out)  # never served


def test_pyargs_run_on_a_buggy_engine_exits_1() -> None:
    spec = "tests.planted.toy_bugs:AbortLeaksSlot"
    proc = subprocess.run(
        # --noconftest: the repo's conftests import torch, which this engine never needs.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q",
         "--hypothesis-profile=dev", "--pyargs",
         "engines.testing.conformance", "--engine", spec, "-k", "zero_waste or parity"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "AbortLeaksSlot-zero_waste FAILED" in proc.stdout or "1 failed" in proc.stdout
