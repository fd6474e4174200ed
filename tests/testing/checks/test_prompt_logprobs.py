"""prompt_logprobs: its planted bug caught (a prompt's logprobs stale on a prefix-cache hit),
a correct engine passing. The paged engine's prompt logprobs themselves:
tests/engines/core/test_prompt_logprobs.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, name_of, planted
from tests.planted.harness import pinned

CHECK = "prompt_logprobs"


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
