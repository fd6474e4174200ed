"""stateful: the state machine catches its planted bug (a removed adapter's slot reused with
its weights, reached by the machine's swap_adapter rule), and the correct engines pass it (a
control; the paged engine with the zoo's adapters)."""

from __future__ import annotations

from typing import Any

import pytest

from engines.zoo import paged_with_loras
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, name_of, planted
from tests.planted.harness import pinned
from tests.planted.lora_bugs import LORA_PLANTED
from tests.planted.tenants import caught_on_the_zoos_adapters, lora_context, settings_for

CHECK = "stateful"


@pytest.mark.parametrize("bug", planted(CHECK, LORA_PLANTED), ids=name_of)
def test_the_suite_catches_the_planted_lora_bug(bug: Any) -> None:
    caught_on_the_zoos_adapters(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_the_correct_engine_with_loras_passes() -> None:
    expect.passes(paged_with_loras, CHECK, settings_for(CHECK), lora_context(paged_with_loras))
