"""compaction: the property on hand-built slot tables (a hole below an occupied slot, or a
request in two slots, fails), its planted bugs caught with a script that shows the hole, a
correct engine passing."""

from __future__ import annotations

import ast
from collections.abc import Hashable
from typing import Any

import pytest

from engines.testing.checks import check_named
from tests.helpers import GOOD, JUDGE, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import hunt, pinned
from tests.planted.toy_bugs import PLANTED, CompactionHole

CHECK = "compaction"
check_compaction = check_named(CHECK)


def test_compaction() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", None)]
    check_compaction(trace(GOOD, tables=tables), JUDGE)
    hole: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), (None, "r0")]
    fails(check_compaction, trace(GOOD, tables=hole), r"slots \[1\] are occupied")
    twice: list[tuple[Hashable | None, ...]] = [("r0", "r0"), ("r0", "r1"), ("r0", None)]
    fails(check_compaction, trace(GOOD, tables=twice), "sits in two slots")


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


def test_repro_script_shows_the_hole_in_the_slot_table() -> None:
    """The printed script runs as it stands, and its printed slot tables show the bug: a free
    slot below an occupied one."""
    caught = hunt(CompactionHole)
    assert caught is not None
    tables = [ast.literal_eval(line.split("slots", 1)[1].strip())
              for line in expect.run_script(expect.script_of(str(caught)))
              if line.startswith("  slots")]
    holes = [t for t in tables
             if any(x is None and y is not None for x, y in zip(t, t[1:], strict=False))]
    assert tables and holes, tables


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
