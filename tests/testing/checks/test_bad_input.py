"""bad_input: the property on hand-built traces (a bad request refused with ValueError
passes; accepted, or refused otherwise, fails), its planted bugs caught, a correct engine
passing."""

from __future__ import annotations

from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.checks import check_named
from engines.testing.workload import BadRequest
from tests.helpers import GOOD, JUDGE, Steps, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, TOY, name_of, planted
from tests.planted.harness import pinned
from tests.planted.toy_bugs import PLANTED

CHECK = "bad_input"
check_bad_input = check_named(CHECK)
L = FinishReason.LENGTH
BAD = (BadRequest(0, "max_tokens 0", Request((1,), SamplingParams(max_tokens=0),
                                             request_id="bad0")),)


def test_bad_input() -> None:
    refused = trace(GOOD, bad=BAD)
    refused.refusals.append(ValueError("max_tokens: must be an integer >= 1, got 0"))
    check_bad_input(refused, JUDGE)
    accepted = trace(GOOD, bad=BAD)
    accepted.refusals.append(None)
    fails(check_bad_input, accepted, "accepted a bad request before step 0")
    wrong_type = trace(GOOD, bad=BAD)
    wrong_type.refusals.append(KeyError("bad0"))
    fails(check_bad_input, wrong_type, "refused a bad request .* with KeyError")


def test_bad_input_leaves_a_declared_parity_to_its_own_xfail() -> None:
    """An engine that declares parity broken (its strict xfail judges it) still has its
    refusals judged by bad_input; the good requests' tokens are not, and it says so."""
    wrong: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (4,), L)], list(GOOD[2])]
    refused = trace(wrong, bad=BAD)
    refused.refusals.append(ValueError("max_tokens: must be an integer >= 1, got 0"))
    fails(check_bad_input, refused, "the good ones changed. parity: request 'r1'")
    declared = judge(declared=frozenset({"parity"}))
    assert check_bad_input(refused, declared) == ("parity",)
    assert check_bad_input(trace(wrong), declared) == ()  # no bad request: nothing to re-check
    accepted = trace(wrong, bad=BAD)
    accepted.refusals.append(None)
    fails(check_bad_input, accepted, "accepted a bad request before step 0", declared)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
