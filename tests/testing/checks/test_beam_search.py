"""beam_search: its planted bugs caught (beam scores not length-normalised, a paged beam
keeping its old block table or writing a shared block), each in a fresh interpreter. Beam
search itself against transformers' generate: tests/engines/core/test_beam_search.py."""

from __future__ import annotations

from typing import Any

import pytest

from engines.testing.features.beams import BEAM_STOPS
from tests.planted import expect
from tests.planted.beam_bugs import BEAM_PLANTED, PagedBeamStopDoesNotFinish
from tests.planted.catalog import name_of, planted

CHECK = "beam_search"


@pytest.mark.parametrize("bug", planted(CHECK, BEAM_PLANTED), ids=name_of)
def test_suite_catches_beam_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)


def test_the_hard_case_catches_a_stop_id_that_does_not_finish_a_beam() -> None:
    """Issue 52: caught in one run of two at the default profile before; the beams feature's
    seed workload (stop ids from the search's own best beam) catches it every run."""
    expect.caught_by_the_hard_case(PagedBeamStopDoesNotFinish, BEAM_STOPS)
