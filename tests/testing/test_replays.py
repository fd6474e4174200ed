"""A report's script replays what failed: a failure on a config variant is replayed on that
variant beside the main engine (in the search's report and the state machine's), and every
report says how many of its replays on fresh engines reproduced it."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as Settings

from engines.testing.context import SuiteOptions, build_context
from engines.testing.judging import Violation
from engines.testing.replays import REPLAYS
from engines.testing.search import search
from engines.testing.stateful import run_engine_machine
from examples.toy_engine import ToyEngine
from tests.planted import variant_bugs
from tests.planted.harness import hunt, pinned
from tests.planted.variant_bugs import EveryOtherBuild, LongPromptsShifted

ROOT = Path(__file__).resolve().parents[2]


def _caught(variant: type[ToyEngine]) -> Violation:
    ctx = build_context(ToyEngine, name="ToyEngine", spec="examples.toy_engine:ToyEngine",
                        options=SuiteOptions(variants={"planted": variant}))
    try:
        search(ctx, "variants", settings=pinned(20))
    except Violation as caught:
        return caught
    raise AssertionError(f"{variant.__name__} was not caught")


def _run(script: str) -> subprocess.CompletedProcess[str]:
    """The script run as a user would run it (its exit code is the verdict)."""
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_a_variants_failure_replays_on_that_variant() -> None:
    caught = _caught(LongPromptsShifted)
    text = str(caught)
    assert text.startswith("variants: ") and caught.variant == "planted", text
    script = text.split("as a runnable script:\n\n", 1)[1]
    assert "import LongPromptsShifted as make_variant0" in script  # the variant's factory
    assert "import ToyEngine as make_engine" in script  # and the main one, to compare
    assert "variants={'planted': make_variant0}" in script
    # Run as printed, the script judges the variant against the main engine and fails.
    proc = _run(script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("variants: "), proc.stderr
    assert f"Confirmed on fresh engines: reproduced {REPLAYS} of {REPLAYS}" in text


def test_a_failure_that_replays_now_and_then_says_how_often(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Builds 0, 2, 4... are wrong: the suite's variant (build 0) fails, and of the replays'
    # fresh variants (builds 1 to 5) two are wrong.
    monkeypatch.setattr(variant_bugs, "_built", itertools.count())
    text = str(_caught(EveryOtherBuild))
    assert re.search(rf"Reproduced 2 of {REPLAYS} \({REPLAYS} replays .* and variant 'planted'\)"
                     r": it depends on timing", text), text


def test_a_main_engine_failure_says_it_was_confirmed() -> None:
    from tests.planted.toy_bugs import PLANTED

    bug = PLANTED[0]
    caught = hunt(bug)
    assert caught is not None
    assert f"Confirmed on fresh engines: reproduced {REPLAYS} of {REPLAYS}" in str(caught)


def test_the_state_machine_replays_a_variants_failure_on_that_variant() -> None:
    ctx = build_context(ToyEngine, name="ToyEngine", spec="examples.toy_engine:ToyEngine",
                        options=SuiteOptions(variants={"planted": LongPromptsShifted}))
    settings = Settings(max_examples=60, derandomize=True, database=None, deadline=None,
                        suppress_health_check=list(HealthCheck), stateful_step_count=12)
    with pytest.raises(Violation) as caught:
        run_engine_machine(ctx, settings=settings)
    text = str(caught.value)
    assert text.startswith("variants: "), text
    assert "import LongPromptsShifted as make_variant0" in text
    assert "variants={'planted': make_variant0}" in text
    assert re.search(r"(Confirmed on fresh engines|Reproduced \d|Not confirmed)", text), text
