"""budget_finish: exactly max_tokens tokens, or fewer ending at a stop; one finishing output per
request and nothing after it; the right finish reason; no stop id within min_tokens."""

from __future__ import annotations

from engines.protocol import FinishReason
from engines.testing.checks.base import Check
from engines.testing.judging.base import Judge, describe, tops
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_budget_finish"]


def check_budget_finish(check: Check, trace: Trace, judge: Judge) -> None:
    """Exactly max_tokens tokens, or fewer ending at the first stop token; one finishing
    output per request and nothing after it; the right finish reason (STOP whenever the last
    token is a stop token, the last budgeted one included; a guided request's also where its
    grammar ended it). No stop token among the first
    min_tokens: the protocol masks them there, so none can end a request before it."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        rid, p = r.request_id, r.params
        outs = trace.outputs.get(rid, [])
        finals = [(s, o) for s, o in outs if o.finished]
        if not finals:
            if trace.stalled:
                continue  # liveness reports it
            raise check.fail(f"{describe(r, trace)} never got a finishing output.")
        fin_step = finals[0][0]
        late = outs[outs.index(finals[0]) + 1:]
        if late:
            s, o = late[0]
            raise check.fail(
                f"{describe(r, trace)} finished in step {fin_step} ({finals[0][1].finish_reason}"
                f") but got another output in step {s}: {o}. Expected nothing after finishing.",
            )
        toks = trace.tokens(rid)
        reason = finals[0][1].finish_reason
        stops = set(p.stop_token_ids)
        held = [i for i, t in enumerate(toks[:p.min_tokens]) if t in stops]
        if held:
            raise check.fail(
                f"{describe(r, trace)} generated stop token {toks[held[0]]} as its token "
                f"{held[0]} {toks}, within its min_tokens={p.min_tokens}. Expected no stop id "
                f"there: min_tokens keeps them from being sampled.",
            )
        early = [i for i, t in enumerate(toks[:-1]) if t in stops]
        if early:
            raise check.fail(
                f"{describe(r, trace)} generated stop token {toks[early[0]]} at position "
                f"{early[0]} but went on to {toks}. Expected it to finish there with STOP.",
            )
        if len(toks) > p.max_tokens:
            raise check.fail(
                f"{describe(r, trace)} generated {len(toks)} tokens {toks}, finishing in step "
                f"{fin_step}. Expected at most max_tokens={p.max_tokens}.",
            )
        if p.logprobs and tops(trace, rid) is not None and len(tops(trace, rid) or []) != len(toks):
            raise check.fail(f"{describe(r, trace)}: top_logprobs has "
                             f"{len(tops(trace, rid) or [])} entries for {len(toks)} tokens.")
        ends_in_stop = bool(toks) and toks[-1] in stops
        if reason == FinishReason.ABORT:
            if rid not in trace.aborted_at:
                raise check.fail(f"{describe(r, trace)} finished with ABORT in step "
                                 f"{fin_step}, but it was never aborted.")
            continue
        expected = ""
        if ends_in_stop:  # STOP wins, even at the last budgeted token
            ok = reason == FinishReason.STOP
            expected = "STOP (it ended on a stop token" + (
                ", which wins over LENGTH at the last budgeted token)"
                if len(toks) == p.max_tokens else ")")
        elif p.guided is not None and reason == FinishReason.STOP:
            # Its grammar ended it, matched in full: the `constraints` check judges the match.
            ok, expected = True, ""
        elif p.stop and reason == FinishReason.STOP:  # a stop string: stop_strings judges it
            ok = True
        else:
            ok = reason == FinishReason.LENGTH and len(toks) == p.max_tokens
            expected = f"LENGTH after exactly {p.max_tokens} tokens" + (
                f", or ABORT: it was aborted at step {trace.aborted_at[rid]}"
                if rid in trace.aborted_at else "")
        if not ok:
            raise check.fail(
                f"{describe(r, trace)} finished in step {fin_step} with {reason} after "
                f"{len(toks)} tokens {toks}. Expected {expected}.",
            )


# Cheap enough to judge the partial trace after every step.
CHECK = Check("budget_finish", check_budget_finish, machine=frozenset({"step"}))
