"""The suite, end to end, on an engine whose steps carry several tokens a row: no false alarm
on the correct one in the checks whose bookkeeping counts tokens (parity, budget and finish,
seeds, logprobs, prefill/decode), and the dropped-token bug caught."""

from __future__ import annotations

import pytest

from engines.testing.context import build_context
from tests.planted.harness import hunt, pinned
from tests.planted.multitoken import DropsSecondOfRun, MultiTokenSteps

CHECKS = ["parity", "budget_finish", "seeds", "logprobs", "prefill_decode", "liveness"]


@pytest.mark.parametrize("check", CHECKS)
def test_multi_token_steps_pass(check: str) -> None:
    ctx = build_context(MultiTokenSteps, name="multi", spec=f"{__name__}:MultiTokenSteps")
    assert hunt(MultiTokenSteps, ctx=ctx, check=check, settings=pinned(15, shrink=False)) is None


def test_a_dropped_token_in_a_run_is_caught() -> None:
    found = hunt(DropsSecondOfRun, settings=pinned(30))
    assert found is not None and "parity" in str(found)
