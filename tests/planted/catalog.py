"""Every planted bug, for the report and the tests that run them all; and how each check's
tests (tests/testing/checks/test_<check>.py) pick theirs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engines.testing.checks import (
    BEAMS,
    CHILDREN,
    KV,
    REFERENCE,
    STOP_STRINGS,
    TOKENIZER,
    VARIANTS,
    catalogue,
)
from tests.planted.beam_bugs import BEAM_PLANTED
from tests.planted.children_bugs import CHILDREN_PLANTED
from tests.planted.constraint_bugs import CONSTRAINT_PLANTED
from tests.planted.continuous_bugs import CONTINUOUS_PLANTED
from tests.planted.crash_bugs import CRASH_PLANTED
from tests.planted.edge_bugs import CONTROLS, EDGE_PLANTED
from tests.planted.model_bugs import MODEL_PLANTED
from tests.planted.paged_bugs import PAGED_PLANTED
from tests.planted.sampling_bugs import SAMPLING_PLANTED
from tests.planted.spec_bugs import SPEC_SEARCHED
from tests.planted.text_bugs import TEXT_PLANTED
from tests.planted.toy_bugs import PLANTED

ALL_PLANTED: list[Any] = [*PLANTED, *EDGE_PLANTED, *CRASH_PLANTED, *CONTINUOUS_PLANTED,
                          *MODEL_PLANTED, *PAGED_PLANTED, *SAMPLING_PLANTED, *TEXT_PLANTED,
                          *CONSTRAINT_PLANTED, *CHILDREN_PLANTED, *SPEC_SEARCHED,
                          *BEAM_PLANTED]
# Correct engines the suite must pass (no false alarm).
ALL_CONTROLS: list[Any] = [*CONTROLS]
# Cheap engines: the whole search runs on each of their bugs.
TOY: list[Any] = [*PLANTED, *EDGE_PLANTED, *CRASH_PLANTED]
# Bugs planted in the reference engines, slower: the seed workloads alone must catch them.
REFERENCE_ENGINES: list[Any] = [*CONTINUOUS_PLANTED, *MODEL_PLANTED, *PAGED_PLANTED]
# What a control engine (a toy engine) cannot be judged on: no reference, variants, KV
# introspection, tokenizer, stop strings, children or beams.
_CONTROLS_LACK = {REFERENCE, VARIANTS, KV, TOKENIZER, STOP_STRINGS, CHILDREN, BEAMS}


def planted(check: str, among: Iterable[Any]) -> list[Any]:
    """The bugs of `among` meant to be caught by `check` (their `caught_by`; "crash" for the
    bugs that surface as a crash, whatever check runs them)."""
    return [bug for bug in among if bug.caught_by == check]


def controlled_checks() -> list[str]:
    """The checks the control engines are judged on: each has their test in its file."""
    return [c.name for c in catalogue() if not _CONTROLS_LACK & set(c.needs)]


def name_of(engine: Any) -> str:
    """A planted bug's or a control's test id: its name."""
    return str(engine.__name__)
