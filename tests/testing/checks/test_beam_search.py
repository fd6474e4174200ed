"""beam_search: its planted bugs caught (beam scores not length-normalised, a paged beam
keeping its old block table or writing a shared block), each in a fresh interpreter. Beam
search itself against transformers' generate: tests/engines/core/test_beam_search.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.planted import expect
from tests.planted.beam_bugs import BEAM_PLANTED
from tests.planted.catalog import name_of, planted

CHECK = "beam_search"


@pytest.mark.parametrize("bug", planted(CHECK, BEAM_PLANTED), ids=name_of)
def test_suite_catches_beam_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)
