"""Each property function on hand-built Traces: one that passes and one that fails, so every
property is shown to accept correct behaviour and to reject the behaviour it exists for."""

from __future__ import annotations

from collections.abc import Hashable

from engines.protocol import FinishReason, Request, SamplingParams, StepOutput
from engines.testing.checks import check_named
from engines.testing.workload import Abort, BadRequest
from tests.helpers import GOOD, JUDGE, R0, R1, Steps, fails, judge, trace

# The registry's checks, called as the suite calls them: check(trace, judge).
check_bad_input = check_named("bad_input")
check_budget_finish = check_named("budget_finish")
check_compaction = check_named("compaction")
check_liveness = check_named("liveness")
check_parity = check_named("parity")
check_slot_lengths = check_named("slot_lengths")
check_work_conservation = check_named("work_conservation")
check_zero_waste = check_named("zero_waste")

L, S, A = FinishReason.LENGTH, FinishReason.STOP, FinishReason.ABORT


def test_parity() -> None:
    check_parity(trace(GOOD), JUDGE)
    bad: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (4,), L)], list(GOOD[2])]
    fails(check_parity, trace(bad), r"^parity: request 'r1' .* at generated position 1: "
                                    r"alone gave 9, batched gave 4")


def test_parity_forgives_an_aborted_prefix_only() -> None:
    cut: Steps = [[("r0", (5,), None), ("r1", (8,), None)], [("r0", (), A), ("r1", (9,), L)]]
    check_parity(trace(cut, aborts=(Abort(1, "r0"),)), JUDGE)
    fails(check_parity, trace(cut), "alone gave 6, batched gave None")


def test_budget_finish() -> None:
    check_budget_finish(trace(GOOD), JUDGE)
    over: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (9,), None)],
                   [("r0", (7,), L), ("r1", (1,), L)]]
    fails(check_budget_finish, trace(over), "generated 3 tokens .* Expected at most max_tokens=2")
    late: Steps = [*GOOD, [("r1", (1,), None)]]
    fails(check_budget_finish, trace(late), "got another output in step 3")


def test_budget_finish_wants_stop_on_a_stop_token() -> None:
    stopping = Request((3,), SamplingParams(max_tokens=2, stop_token_ids=(8,)), request_id="r1")
    steps: Steps = [[("r0", (5,), None), ("r1", (8,), S)], [("r0", (6,), None)],
                    [("r0", (7,), L)]]
    check_budget_finish(trace(steps, requests=(R0, stopping)), JUDGE)
    went_on: Steps = [[("r0", (5,), None), ("r1", (8,), None)], *GOOD[1:]]
    fails(check_budget_finish, trace(went_on, requests=(R0, stopping)),
          "generated stop token 8 at position 0 but went on")


def test_liveness() -> None:
    check_liveness(trace(GOOD), JUDGE)
    fails(check_liveness, trace(GOOD[:2], stalled=True), "request 'r0' .* had not finished")
    stray: Steps = [[*GOOD[0], ("ghost", (1,), None)], *GOOD[1:]]
    t = trace(stray)
    t.stray.append((0, StepOutput("ghost", (1,), None)))
    fails(check_liveness, t, "'ghost', which the engine was never given")


def test_liveness_wants_an_abort_to_end_the_request_within_a_step() -> None:
    prompt: Steps = [[("r0", (5,), None), ("r1", (8,), None)], [("r0", (), A), ("r1", (9,), L)]]
    check_liveness(trace(prompt, aborts=(Abort(0, "r0"),)), JUDGE)
    slow: Steps = [*prompt[:1], [("r1", (9,), L)], [("r0", (), A)]]
    fails(check_liveness, trace(slow, aborts=(Abort(0, "r0"),)), "only finished in step 2")


def test_bad_input() -> None:
    bad = (BadRequest(0, "max_tokens 0", Request((1,), SamplingParams(max_tokens=0),
                                                 request_id="bad0")),)
    refused = trace(GOOD, bad=bad)
    refused.refusals.append(ValueError("max_tokens: must be an integer >= 1, got 0"))
    check_bad_input(refused, JUDGE)
    accepted = trace(GOOD, bad=bad)
    accepted.refusals.append(None)
    fails(check_bad_input, accepted, "accepted a bad request before step 0")
    wrong_type = trace(GOOD, bad=bad)
    wrong_type.refusals.append(KeyError("bad0"))
    fails(check_bad_input, wrong_type, "refused a bad request .* with KeyError")


def test_bad_input_leaves_a_declared_parity_to_its_own_xfail() -> None:
    """An engine that declares parity broken (its strict xfail judges it) still has its
    refusals judged by bad_input; the good requests' tokens are not, and it says so."""
    bad = (BadRequest(0, "max_tokens 0", Request((1,), SamplingParams(max_tokens=0),
                                                 request_id="bad0")),)
    wrong: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (4,), L)], list(GOOD[2])]
    refused = trace(wrong, bad=bad)
    refused.refusals.append(ValueError("max_tokens: must be an integer >= 1, got 0"))
    fails(check_bad_input, refused, "the good ones changed. parity: request 'r1'")
    declared = judge(declared=frozenset({"parity"}))
    assert check_bad_input(refused, declared) == ("parity",)
    assert check_bad_input(trace(wrong), declared) == ()  # no bad request: nothing to re-check
    accepted = trace(wrong, bad=bad)
    accepted.refusals.append(None)
    fails(check_bad_input, accepted, "accepted a bad request before step 0", declared)


def test_compaction() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", None)]
    check_compaction(trace(GOOD, tables=tables), JUDGE)
    hole: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), (None, "r0")]
    fails(check_compaction, trace(GOOD, tables=hole), r"slots \[1\] are occupied")
    twice: list[tuple[Hashable | None, ...]] = [("r0", "r0"), ("r0", "r1"), ("r0", None)]
    fails(check_compaction, trace(GOOD, tables=twice), "sits in two slots")


def test_slot_lengths() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", None), (None, None)]
    # After step 0: r0 cached its prompt (2) and owes its first token's KV: 2 + 1 - 1.
    check_slot_lengths(trace(GOOD, tables=tables, lengths=[(2, 1), (3, 0), (0, 0)]), JUDGE)
    fails(check_slot_lengths, trace(GOOD, tables=tables, lengths=[(3, 1), (3, 0), (0, 0)]),
          "caching 3 tokens. Expected prompt 2 \\+ generated 1 - 1 = 2")


def test_zero_waste() -> None:
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", None)]
    check_zero_waste(trace(GOOD, tables=tables, wasted=[0, 0, 0]), JUDGE)
    fails(check_zero_waste, trace(GOOD, tables=tables, wasted=[0, 0, 1]),
          "wasted_slot_steps rose by 1")
    riding: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", "r1"), ("r0", "r1")]
    fails(check_zero_waste, trace(GOOD, tables=riding), "'r1' finished in step 1 but still")


def test_work_conservation() -> None:
    r2 = Request((3,), SamplingParams(max_tokens=1), request_id="r2")
    steps: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                    [("r0", (6,), None), ("r1", (9,), L)],
                    [("r0", (7,), L), ("r2", (8,), L)]]
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), ("r0", None), (None, None)]
    waiting = [{"r0", "r1", "r2"}, {"r2"}, {"r2"}]
    holders = [set(), {"r0", "r1"}, {"r0"}]
    check_work_conservation(trace(steps, requests=(R0, R1, r2), tables=tables,
                                  waiting=waiting, holders=holders), JUDGE)
    # Step 1 freed r1's slot at its end; step 2 must then serve r0 and r2. Here it served r0
    # only: r2 waited with a slot free.
    idle: Steps = [*steps[:2], [("r0", (7,), L)], [("r2", (8,), L)]]
    fails(check_work_conservation,
          trace(idle, requests=(R0, R1, r2), tables=[*tables, (None, None)],
                waiting=[*waiting, {"r2"}], holders=[*holders, set()]),
          r"step 2 served 1 request\(s\)")
