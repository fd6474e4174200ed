"""token_range: the property on a hand-built trace (an id past the vocabulary fails), its
planted bug caught, a correct engine passing."""

from __future__ import annotations

from typing import Any

import pytest

from engines.testing.checks import check_named
from tests.helpers import GOOD, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import pinned

CHECK = "token_range"
check_token_range = check_named(CHECK)


def test_token_range() -> None:
    t = trace(GOOD)
    t.vocab_size = 10
    check_token_range(t, judge())
    t.vocab_size = 9  # r1's 9 is now one past the vocabulary
    fails(check_token_range, t, "got token id 9 in step 1 .* Expected ids in 0..8")


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
