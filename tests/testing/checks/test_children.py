"""children: its planted bug caught (a family of n > 1 children sharing one seed), in a fresh
interpreter. The property's own tests on our engines: tests/engines/core/test_children.py."""

from __future__ import annotations

from typing import Any

import pytest

from engines.testing.features.children import PAST_THE_POOL
from tests.planted import expect
from tests.planted.catalog import name_of, planted
from tests.planted.children_bugs import CHILDREN_PLANTED
from tests.planted.lifecycle_bugs import PreemptedChildTakesSiblingsTokens
from tests.planted.paged_bugs import SmallPool

CHECK = "children"


@pytest.mark.parametrize("bug", planted(CHECK, CHILDREN_PLANTED), ids=name_of)
def test_suite_catches_children_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)


def test_tie_aware_greedy_children_part_only_at_a_near_tie() -> None:
    # Two greedy children that part: forgiven where the reference's candidates there tie
    # (the table's flat top 50), a failure where they do not (ids past its candidates).
    import dataclasses

    from engines.protocol import FinishReason, Request, SamplingParams
    from engines.testing.checks import check_named
    from engines.testing.judging import Violation
    from tests.helpers import Table, judge, trace

    r = Request((1, 2), SamplingParams(max_tokens=2, n=2), request_id="r0")

    def run(kid1: tuple[int, ...]) -> object:
        t = trace([[("r0", (5,), None), ("r0", (5,), None)],
                   [("r0", (6,), FinishReason.LENGTH), ("r0", kid1[1:], FinishReason.LENGTH)]],
                  requests=(r,))
        t.outputs["r0"] = [(k, dataclasses.replace(o, index=i % 2))
                           for i, (k, o) in enumerate(t.outputs["r0"])]
        return check_named(CHECK)(t, judge(parity="tie-aware", tolerance=0.1,
                                           reference=Table()))

    assert run((5, 7)) == (1, 0, 0, 1, 0)
    with pytest.raises(Violation, match="children differ"):
        run((5, 70))


def test_the_hard_case_catches_a_preempted_child_resumed_with_its_siblings_tokens() -> None:
    """Issue 51's preempted family: the children feature's families past the engine's small
    pool preempt children while their siblings run; the correct small-pool engine passes."""
    expect.caught_by_the_hard_case_not_its_control(
        PreemptedChildTakesSiblingsTokens, SmallPool, CHECK, PAST_THE_POOL)
