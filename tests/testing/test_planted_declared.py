"""The planted bugs are declared as the tests of their checks (tests/testing/checks/) expect:
each speculation bug (tests/planted/spec_bugs.py) a paged engine with one method overridden,
each constraint bug (tests/planted/constraint_bugs.py) a one-line docstring over the engine
it is planted in, naming a check that catches its class."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from tests.planted.catalog import name_of
from tests.planted.constraint_bugs import CONSTRAINT_PLANTED, CONTROLS
from tests.planted.spec_bugs import SPEC_PLANTED


@pytest.mark.parametrize("bug", SPEC_PLANTED, ids=name_of)
def test_planted_bug_is_declared(bug: Any) -> None:
    assert issubclass(bug, PagedEngine) and bug.__doc__
    overridden = [k for k, v in vars(bug).items()
                  if inspect.isfunction(v) and not k.startswith("__")]
    assert len(overridden) == 1, f"{bug.__name__} overrides {overridden}: one method each"


@pytest.mark.parametrize("bug", CONSTRAINT_PLANTED, ids=name_of)
def test_planted_constraint_bug_is_declared(bug: Any) -> None:
    assert bug.caught_by in {"parity", "reference_parity", "constraints"}
    assert bug.__doc__ and "\n" not in bug.__doc__.strip()
    assert issubclass(bug, tuple(CONTROLS.values()))
