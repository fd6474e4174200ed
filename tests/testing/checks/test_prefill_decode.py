"""prefill_decode: the property on a hand-built trace (a token decoded must be what
prefilling the prompt and the tokens before it gives), its planted bug caught, a correct
engine and a multi-token one passing."""

from __future__ import annotations

from typing import Any

import pytest

from engines.protocol import FinishReason
from engines.testing.checks import check_named
from tests.helpers import GOOD, Steps, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, name_of, planted
from tests.planted.harness import pinned

CHECK = "prefill_decode"
check_prefill_decode = check_named(CHECK)


def test_prefill_decode() -> None:
    check_prefill_decode(trace(GOOD), judge())
    # r0 decoded 5, 6, 9 where prefilling (1, 2, 5, 6) gives 7: a decode-only bug.
    bad: Steps = [list(GOOD[0]), list(GOOD[1]), [("r0", (9,), FinishReason.LENGTH)]]
    fails(check_prefill_decode, trace(bad),
          r"decoded 9 as its token 2 .* prefilling its prompt and its first 2 token\(s\) "
          r"\[5, 6\] gives \[7\]")


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)
