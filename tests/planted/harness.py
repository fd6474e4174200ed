"""How the repo's tests and the planted-bug report run the suite on one planted bug."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import Phase
from hypothesis import settings as Settings
from hypothesis.errors import FlakyFailure

from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.crash import EngineCrashed
from engines.testing.judging import Violation
from engines.testing.report import crash_finding
from engines.testing.search import search

__all__ = ["check_of", "context_of", "fresh_engines", "hunt", "hunt_in_subprocess", "pinned"]


def check_of(bug: Any) -> str:
    """The check to run: the one named by `caught_by`, except for bugs that surface as a
    crash (any check sees one), which name the check they are run under in `check`."""
    return str(getattr(bug, "check", bug.caught_by))


def context_of(bug: Any) -> SuiteContext:
    """The bug's context; a bug only a reference engine (or a config variant) can see names
    it in `reference` (or `variants`)."""
    options = SuiteOptions(reference=getattr(bug, "reference", None),
                           variants=getattr(bug, "variants", {}))
    return build_context(bug, name=bug.__name__, spec=f"{bug.__module__}:{bug.__name__}",
                         options=options)


def pinned(max_examples: int = 150, *, shrink: bool = True) -> Settings:
    """Derandomized settings, whatever the profile: a verdict must not depend on luck."""
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    return Settings(max_examples=max_examples, derandomize=True, database=None, phases=phases)


def fresh_engines(ctx: SuiteContext) -> None:
    """Every workload on a freshly built engine, in every pool of the context. The pools
    choose by how fast engines build (EnginePool.cheap), and a reused engine's prefix cache
    can hide a bug (it holds right blocks): under `pytest -n auto` on a loaded machine the
    LoRA engines' builds (5-8 ms at rest) once went past the bound's wall time and StaleIndex
    escaped. The bound now reads CPU time too; a hunt pins its pools all the same."""
    for pool in ctx.pools:
        pool.build_s = 0.0


def hunt(bug: Any, *, seeds: bool = True, settings: Settings | None = None,
         ctx: SuiteContext | None = None, check: str | None = None) -> Violation | None:
    """Run the bug's check (or `check`); the Violation it raised, or None if it passed. A
    crash outside a judged run (the oracle's, as workloads are drawn) reads as the pytest
    run shows it (engines.testing.conformance)."""
    ctx = ctx or context_of(bug)
    fresh_engines(ctx)
    try:
        search(ctx, check or check_of(bug), settings=settings or pinned(), seeds=seeds)
    except Violation as caught:
        return caught
    except EngineCrashed as crash:
        return crash_finding(crash)
    except FlakyFailure as flaky:
        # The check failed, and a rerun of the same workload did not: a bug whose symptom
        # depends on the engine's state before the workload (e.g. a pooled engine's free
        # list). Caught all the same: its first violation is the finding.
        first = next((e for e in flaky.exceptions if isinstance(e, Violation)), None)
        if first is None:
            raise
        return first
    return None


_ROOT = Path(__file__).resolve().parents[2]
_HUNT = """
import importlib, sys
from tests.planted.harness import hunt, pinned
bug = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
caught = hunt(bug, seeds=sys.argv[4] == "seeds", settings=pinned(int(sys.argv[3]), shrink=False))
print(caught.prop if caught is not None else "")
print(caught if caught is not None else "")
"""


def hunt_in_subprocess(bug: Any, max_examples: int = 60, *, seeds: bool = True
                       ) -> tuple[str | None, str]:
    """hunt(bug, seeds=seeds) with pinned(max_examples, shrink=False) in a fresh interpreter:
    the check's name that caught it (None if none did) and its report. For the hunts whose
    verdict, in a long pytest worker, moved with what earlier tests left in the process (seen
    under `pytest -n auto` only): a fresh process gives the verdict a user's run would."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-c", _HUNT, bug.__module__, bug.__name__,
                           str(max_examples), "seeds" if seeds else "no-seeds"],
                          capture_output=True, text=True, cwd=_ROOT,
                          env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    prop, _, report = done.stdout.partition("\n")
    return prop or None, report
