"""work_conservation: the property on hand-built traces (a request left waiting beside a
free slot fails), its planted bugs caught, a correct engine passing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.checks import check_named
from tests.helpers import JUDGE, R0, R1, Steps, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import pinned
from tests.planted.toy_bugs import PLANTED

CHECK = "work_conservation"
check_work_conservation = check_named(CHECK)
L = FinishReason.LENGTH


def test_work_conservation() -> None:
    r2 = Request((3,), SamplingParams(max_tokens=1), request_id="r2")
    steps: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                    [("r0", (6,), None), ("r1", (9,), L)],
                    [("r0", (7,), L), ("r2", (8,), L)]]
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", None), (None, None)]
    waiting = [{"r0", "r1", "r2"}, {"r2"}, {"r2"}]
    holders = [set(), {"r0", "r1"}, {"r0"}]
    check_work_conservation(trace(steps, requests=(R0, R1, r2), tables=tables,
                                  waiting=waiting, holders=holders), JUDGE)
    # Step 1 freed r1's slot at its end; step 2 must then serve r0 and r2. Here it served r0
    # only: r2 waited with a slot free.
    idle: Steps = [*steps[:2], [("r0", (7,), L)], [("r2", (8,), L)]]
    fails(check_work_conservation,
          trace(idle, requests=(R0, R1, r2), tables=[*tables, (None, None)],
                waiting=[*waiting, {"r2"}], holders=[*holders, set()]),
          r"step 2 served 1 request\(s\)")


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
