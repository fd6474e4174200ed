"""The properties on Traces whose steps carry several tokens for one row, as a speculating
engine's do (accepted drafts plus the bonus token in one step): each accepts the correct
multi-token trace and keeps its bite on the bug speculation makes likely there (tokens past
the budget or past a stop id inside an accepted run, a wrong accepted draft, rejected drafts'
KV left cached)."""

from __future__ import annotations

from collections.abc import Hashable

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.checks import check_named
from tests.helpers import JUDGE, R1, Steps, fails, trace

check_budget_finish = check_named("budget_finish")
check_parity = check_named("parity")
check_slot_lengths = check_named("slot_lengths")
check_liveness = check_named("liveness")

L, S = FinishReason.LENGTH, FinishReason.STOP
# r0's greedy tokens alone are 5, 6, 7 (the helpers' table); r1's are 8, 9.
R0 = Request((1, 2), SamplingParams(max_tokens=3), request_id="r0")
REQS = (R0, R1)
# Step 1 gives r0 two tokens (one accepted draft + the bonus) and r1 one (no draft): the
# ragged batch of rows with and without drafts in one step.
SPEC: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
               [("r0", (6, 7), L), ("r1", (9,), L)]]


def test_multi_token_steps_pass_every_count_based_check() -> None:
    t = trace(SPEC, requests=REQS)
    for check in (check_budget_finish, check_parity, check_liveness):
        check(t, JUDGE)


def test_budget_overrun_inside_an_accepted_run_is_caught() -> None:
    over: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                   [("r0", (6, 7, 1), L), ("r1", (9,), L)]]
    fails(check_budget_finish, trace(over, requests=REQS),
          "generated 4 tokens .* Expected at most max_tokens=3")


def test_a_stop_id_inside_an_accepted_run_must_end_the_request_there() -> None:
    stopping = Request((3,), SamplingParams(max_tokens=2, stop_token_ids=(8,)), request_id="r1")
    good: Steps = [[("r0", (5, 6), None), ("r1", (8,), S)], [("r0", (7,), L)]]
    check_budget_finish(trace(good, requests=(R0, stopping)), JUDGE)
    ran_on: Steps = [[("r0", (5, 6), None), ("r1", (8, 9), L)], [("r0", (7,), L)]]
    fails(check_budget_finish, trace(ran_on, requests=(R0, stopping)),
          "generated stop token 8 at position 0 but went on")


def test_a_stop_id_within_min_tokens_inside_a_run_is_caught() -> None:
    held = Request((3,), SamplingParams(max_tokens=2, stop_token_ids=(8,), min_tokens=2),
                   request_id="r1")
    early: Steps = [[("r0", (5, 6, 7), L), ("r1", (8,), S)]]
    fails(check_budget_finish, trace(early, requests=(R0, held)), "within its min_tokens=2")


def test_a_wrong_accepted_draft_is_caught_at_its_position() -> None:
    wrong: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                    [("r0", (6, 4), L), ("r1", (9,), L)]]
    fails(check_parity, trace(wrong, requests=REQS),
          r"request 'r0' .* at generated position 2: alone gave 7, batched gave 4")


def test_slot_lengths_after_a_multi_token_step() -> None:
    # After step 0 r0 has 2 tokens: it caches prompt 2 + 2 - 1 = 3 (the bonus token's KV is
    # written by the next forward); r1 has 1: 1 + 1 - 1 = 1.
    steps: Steps = [[("r0", (5, 6), None), ("r1", (8,), None)],
                    [("r0", (7,), L), ("r1", (9,), L)]]
    tables: list[tuple[Hashable | None, ...]] = [("r0", "r1"), (None, None)]
    check_slot_lengths(trace(steps, requests=REQS, tables=tables,
                             lengths=[(3, 1), (0, 0)]), JUDGE)
    # A rejected draft's KV left in place: r0 verified 3 drafts, kept 1 + bonus, cached 5.
    fails(check_slot_lengths, trace(steps, requests=REQS, tables=tables,
                                    lengths=[(5, 1), (0, 0)]),
          r"slot 0 holds .* with 2 generated token\(s\), caching 5 tokens. Expected prompt 2 "
          r"\+ generated 2 - 1 = 3")
