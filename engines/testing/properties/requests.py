"""Request-level properties: budgets and finish reasons, liveness, refusal of bad input,
and the range of every emitted token id."""

from __future__ import annotations

import operator
from collections.abc import Mapping

from engines.protocol import FinishReason
from engines.testing.check import Check
from engines.testing.coverage import Coverage, Tally
from engines.testing.properties.base import Judge, Violation, describe, tops
from engines.testing.recorder import Trace

__all__ = ["BAD_INPUT_TALLY", "check_bad_input", "check_budget_finish", "check_liveness",
           "check_token_range"]


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
            expected = f"LENGTH after exactly {p.max_tokens} tokens"
        if not ok:
            raise check.fail(
                f"{describe(r, trace)} finished in step {fin_step} with {reason} after "
                f"{len(toks)} tokens {toks}. Expected {expected}.",
            )


def check_liveness(check: Check, trace: Trace, judge: Judge) -> None:
    """Every request finishes within the step bound; has_work() tells the truth; no output
    for an id the engine was never given; an abort takes effect within two steps."""
    __tracebackhide__ = True
    w = trace.workload
    if trace.stalled:
        stuck = [r for r in w.requests if r.request_id not in trace.finished_at
                 and w.arrivals[w.requests.index(r)] < len(trace.steps)]
        r = stuck[0]
        raise check.fail(
            f"{describe(r, trace)} had not finished after {len(trace.steps)} steps (the bound "
            f"for this workload); it had {trace.tokens(r.request_id)} so far, and "
            f"{len(stuck)} request(s) were unfinished: {[x.request_id for x in stuck]}.",
        )
    if trace.has_work_errors:
        step, text = trace.has_work_errors[0]
        raise check.fail(f"before step {step}, {text}.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            continue  # the bad-input property's to report
        raise check.fail(f"step {step} returned an output for request id "
                         f"{out.request_id!r}, which the engine was never given: {out}.")
    for rid, at in trace.aborted_at.items():
        done = trace.finished_at.get(rid)
        if done is None or done > at + 1:
            raise check.fail(
                f"request {rid!r} was aborted before step {at} but "
                + (f"only finished in step {done}" if done is not None else "never finished")
                + f". Expected its last output by step {at + 1}.",
            )


def check_bad_input(check: Check, trace: Trace, judge: Judge) -> tuple[str, ...]:
    """Bad requests are refused with InvalidRequest (a ValueError) and change nothing: every
    good request still passes the checks this one re-judges (`check.rejudges`: its alone
    tokens, its budget). Returns those it did not re-run on the good requests because the
    engine declares them broken (for the summary: BAD_INPUT_TALLY)."""
    __tracebackhide__ = True
    w = trace.workload
    for b, refused in zip(w.bad, trace.refusals, strict=False):
        shown = b.duplicate_of if b.duplicate_of is not None else b.request.request_id
        if refused is None:
            raise check.fail(
                f"add_request accepted a bad request before step {b.step} "
                f"({b.kind}: {b.request}, request_id {shown!r}). Expected InvalidRequest.")
        if not isinstance(refused, ValueError):
            raise check.fail(f"add_request refused a bad request before step {b.step} "
                             f"({b.kind}) with {type(refused).__name__}: {refused}. Expected "
                             "InvalidRequest (a ValueError).")
    side_effects = trace.bad_side_effects + (trace.has_work_errors if w.bad else [])
    if side_effects:
        step, text = side_effects[0]
        raise check.fail(f"before step {step}, {text}. Expected a refused request "
                         "to leave the engine exactly as it was.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            raise check.fail(f"step {step} returned an output for a refused request: "
                             f"{out}. Expected none.")
    if not w.bad:
        return ()
    left = tuple(c.name for c in check.rejudges if c.name in judge.declared)
    try:
        for other in check.rejudges:
            if other.name not in left:
                other(trace, judge)
    except Violation as v:
        raise check.fail(f"after refusing {len(w.bad)} bad request(s), the good "
                         f"ones changed. {v}") from None
    return left


def _add_unrechecked(coverage: Coverage, left: tuple[str, ...], check: str) -> None:
    """bad_input's re-checks of the good requests left to their own declared xfail."""
    for name in left:
        coverage.most[f"{check}: not re-checked, declared broken: {name}"] = 1


def _unrechecked_notes(data: Mapping[str, int], check: str) -> list[str]:
    prefix = f"max {check}: not re-checked, declared broken: "
    left = sorted(k.removeprefix(prefix) for k in data if k.startswith(prefix))
    if not left:
        return []
    return [f"{check}: the good requests beside refused ones were not re-checked for "
            f"{', '.join(left)}, which the engine declares broken (its own strict xfail "
            "judges it); the refusals and what they left behind were"]


BAD_INPUT_TALLY = Tally(_add_unrechecked, _unrechecked_notes)


def _is_id(token: object, vocab: int) -> bool:
    # Integers of any kind (numpy's too) but not bools, as the protocol's validation reads ids.
    return (not isinstance(token, bool) and hasattr(token, "__index__")
            and 0 <= operator.index(token) < vocab)  # type: ignore[call-overload]


def check_token_range(check: Check, trace: Trace, judge: Judge) -> None:
    """Every emitted token id, and every top_logprobs candidate, is in 0..vocab_size-1."""
    __tracebackhide__ = True
    vocab = trace.vocab_size
    for r in trace.workload.requests:
        for step, out in trace.outputs.get(r.request_id, []):
            cands = [t for top in out.top_logprobs or () for t in top]
            bad = [t for t in (*out.token_ids, *cands) if not _is_id(t, vocab)]
            if bad:
                raise check.fail(f"{describe(r, trace)} got token id {bad[0]!r} in step "
                                 f"{step} ({out}). Expected ids in 0..{vocab - 1} (vocab_size "
                                 f"{vocab}).")
