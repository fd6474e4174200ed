"""stop_strings: its planted bug caught (a stop string spanning two steps missed), by the
seed workloads and by the search alone. Our engines' stop strings against the tokenizer's
decode: tests/engines/core/test_detokenize.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.planted import expect
from tests.planted.catalog import name_of, planted
from tests.planted.composition_bugs import COMPOSITION_PLANTED
from tests.planted.text_bugs import TEXT_PLANTED

CHECK = "stop_strings"


@pytest.mark.parametrize("bug", planted(CHECK, TEXT_PLANTED), ids=name_of)
def test_suite_catches_text_bugs(bug: Any) -> None:
    """The seed workloads alone catch it."""
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TEXT_PLANTED), ids=name_of)
def test_the_search_alone_finds_text_bugs(bug: Any) -> None:
    """Without the hand-picked workload the drawn stop strings and outputs find it too."""
    expect.found_by_the_search_alone(bug, 60)


@pytest.mark.parametrize("bug", planted(CHECK, COMPOSITION_PLANTED), ids=name_of)
def test_suite_catches_a_family_ended_by_one_childs_stop_string(bug: Any) -> None:
    """Only a family that carries stop strings shows it (tests/testing/test_composition.py):
    the children feature's seed workload holds one."""
    expect.caught_by_seed_workloads(bug)
