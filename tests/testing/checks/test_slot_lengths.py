"""slot_lengths: the property on hand-built traces (each slot caches its prompt and all but
its last generated token; a multi-token step's rejected drafts' KV left cached fails), its
planted bug caught, a correct engine passing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from engines.protocol import FinishReason
from engines.testing.checks import check_named
from tests.helpers import GOOD, JUDGE, Steps, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import pinned
from tests.planted.toy_bugs import PLANTED

CHECK = "slot_lengths"
check_slot_lengths = check_named(CHECK)
L = FinishReason.LENGTH


def test_slot_lengths() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", None), (None, None)]
    # After step 0: r0 cached its prompt (2) and owes its first token's KV: 2 + 1 - 1.
    check_slot_lengths(trace(GOOD, tables=tables, lengths=[(2, 1), (3, 0), (0, 0)]), JUDGE)
    fails(check_slot_lengths, trace(GOOD, tables=tables, lengths=[(3, 1), (3, 0), (0, 0)]),
          "caching 3 tokens. Expected prompt 2 \\+ generated 1 - 1 = 2")


def test_slot_lengths_after_a_multi_token_step() -> None:
    # After step 0 r0 has 2 tokens: it caches prompt 2 + 2 - 1 = 3 (the bonus token's KV is
    # written by the next forward); r1 has 1: 1 + 1 - 1 = 1.
    steps: Steps = [[("r0", (5, 6), None), ("r1", (8,), None)],
                    [("r0", (7,), L), ("r1", (9,), L)]]
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), (None, None)]
    check_slot_lengths(trace(steps, tables=tables, lengths=[(3, 1), (0, 0)]), JUDGE)
    # A rejected draft's KV left in place: r0 verified 3 drafts, kept 1 + bonus, cached 5.
    fails(check_slot_lengths, trace(steps, tables=tables, lengths=[(5, 1), (0, 0)]),
          r"slot 0 holds .* with 2 generated token\(s\), caching 5 tokens. Expected prompt 2 "
          r"\+ generated 2 - 1 = 3")


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
