"""zero_waste: the property on hand-built traces (a finished request riding in its slot, or
wasted slot-steps, fails), its planted bug caught (by the search, and by a whole `--pyargs`
run that fails this check's test only), a correct engine passing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Hashable
from typing import Any

import pytest

from engines.testing.checks import check_named
from tests.helpers import GOOD, JUDGE, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import pinned
from tests.planted.toy_bugs import PLANTED

CHECK = "zero_waste"
check_zero_waste = check_named(CHECK)


def test_zero_waste() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", None)]
    check_zero_waste(trace(GOOD, tables=tables, wasted=[0, 0, 0]), JUDGE)
    fails(check_zero_waste, trace(GOOD, tables=tables, wasted=[0, 0, 1]),
          "wasted_slot_steps rose by 1")
    riding: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", "r1")]
    fails(check_zero_waste, trace(GOOD, tables=riding), "'r1' finished in step 1 but still")


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


def test_pyargs_run_on_a_buggy_engine_fails_the_right_test() -> None:
    spec = "tests.planted.toy_bugs:AbortLeaksSlot"
    proc = subprocess.run(
        # --noconftest: the repo's conftests import torch, which this engine never needs.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-q",
         "--hypothesis-profile=batching-dev", "-rA", "--pyargs",
         "engines.testing.conformance", "--engine", spec, "-k", "zero_waste or parity"],
        cwd=expect.ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED engines/testing/conformance.py::test_conformance[AbortLeaksSlot-zero_waste]" \
        in proc.stdout, proc.stdout
    assert "PASSED engines/testing/conformance.py::test_conformance[AbortLeaksSlot-parity]" \
        in proc.stdout, proc.stdout


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
