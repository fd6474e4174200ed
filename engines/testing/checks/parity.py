"""parity: every greedy or seeded request's tokens equal its tokens served alone on a fresh
engine of the same factory (a prefix, if aborted or cut off), whatever else was in flight."""

from __future__ import annotations

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.coverage import Tally
from engines.testing.features.tenants import FEATURE as TENANTS_FEATURE
from engines.testing.judging.base import Judge, describe, step_of_token, tops
from engines.testing.judging.processed import Forced, add_forced, forced_notes
from engines.testing.recorder import Trace

__all__ = ["CHECK", "FORCED_TALLY", "check_parity", "owes_prefix_only", "where"]

# What tie-aware parity judged of processed greedy choices, by field (parity and
# reference_parity alike).
FORCED_TALLY = Tally(add_forced, forced_notes)


def owes_prefix_only(trace: Trace, r: Request, observed_len: int, expected_len: int) -> bool:
    # An aborted (or never finished) request owes a prefix of its tokens, no more.
    cut_short = r.request_id in trace.aborted_at or r.request_id not in trace.finished_at
    return cut_short and observed_len < expected_len


def check_parity(check: Check, trace: Trace, judge: Judge) -> Forced:
    """Every greedy or seeded request's tokens equal its tokens served alone on a fresh engine
    of the same factory (a prefix, if aborted or cut off). Returns what tie-aware parity
    judged of processed greedy choices (engines.testing.judging.processed)."""
    __tracebackhide__ = True
    forced = Forced()
    for r in trace.workload.requests:
        if not judge.comparable(r.params):
            # Unseeded sampling (or sampling in tie-aware mode): no run to compare with; under
            # tie-aware parity what its filters forbid is still judged.
            how = judge.filtered(r.prompt_token_ids, r.params, trace.tokens(r.request_id),
                                 forced)
            if how is not None:
                raise check.fail(f"{describe(r, trace)} drew a token its filters forbid: "
                                 f"{how}. Its tokens: {trace.tokens(r.request_id)}.")
            continue
        alone = judge.oracle(r.prompt_token_ids, r.params,
                             lora_path=trace.lora_paths.get(r.request_id))
        got = trace.tokens(r.request_id)
        if owes_prefix_only(trace, r, len(got), len(alone.tokens)):
            alone_tokens = alone.tokens[: len(got)]
        else:
            alone_tokens = alone.tokens
        how = judge.diverges(r.prompt_token_ids, got, alone_tokens,
                             observed_top=tops(trace, r.request_id),
                             expected_top=alone.top_logprobs, params=r.params, forced=forced)
        if how is not None:
            raise check.fail(f"{describe(r, trace)} diverged from its alone run "
                             f"{where(trace, r, got, alone_tokens)}, {how}. Alone it generated "
                             f"{list(alone.tokens)}; in this workload {got}.")
    return forced


def where(trace: Trace, r: Request, got: list[int], expected: tuple[int, ...]) -> str:
    pos = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
               min(len(got), len(expected)))
    step = step_of_token(trace, r.request_id, pos)
    return f"in step {step}" if step is not None else "by the time it finished"


CHECK = Check("parity", check_parity, draws=(TENANTS_FEATURE.use(),), tally=FORCED_TALLY)
