"""children: its planted bug caught (a family of n > 1 children sharing one seed), in a fresh
interpreter. The property's own tests on our engines: tests/engines/core/test_children.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.planted import expect
from tests.planted.catalog import name_of, planted
from tests.planted.children_bugs import CHILDREN_PLANTED

CHECK = "children"


@pytest.mark.parametrize("bug", planted(CHECK, CHILDREN_PLANTED), ids=name_of)
def test_suite_catches_children_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)
