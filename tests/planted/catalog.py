"""Every planted bug, for the report and the tests that run them all."""

from __future__ import annotations

from typing import Any

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
