"""Every planted bug, for the report and the tests that run them all."""

from __future__ import annotations

from typing import Any

from tests.planted.continuous_bugs import CONTINUOUS_PLANTED
from tests.planted.toy_bugs import PLANTED

ALL_PLANTED: list[Any] = [*PLANTED, *CONTINUOUS_PLANTED]
