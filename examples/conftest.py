"""The fixture way in: override `engine_factory` to hand the suite your engine."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from examples.toy_engine import ToyEngine


@pytest.fixture
def engine_factory() -> Callable[[], ToyEngine]:
    return ToyEngine
