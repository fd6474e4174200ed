"""The properties (docs/architecture.md lists them), each a function judging one Trace.

A property raises Violation with a sentence naming the request, the step, what was
expected and what was observed; the suite appends the runnable repro.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from engines.protocol import FinishReason, Request
from engines.testing.oracle import AloneOracle, ParityMode, first_divergence
from engines.testing.recorder import Trace

__all__ = [
    "PROPERTIES",
    "Judge",
    "Violation",
    "check_bad_input",
    "check_budget_finish",
    "check_compaction",
    "check_liveness",
    "check_parity",
    "check_slot_lengths",
    "check_work_conservation",
    "check_zero_waste",
]


class Violation(AssertionError):
    """A property failed; str() is the whole explanation."""

    def __init__(self, prop: str, message: str) -> None:
        super().__init__(message)
        self.prop = prop


@dataclass(frozen=True, slots=True)
class Judge:
    """What properties need besides the trace: the alone oracle and the parity mode."""

    oracle: AloneOracle
    parity: ParityMode = "exact"
    tolerance: float = 1e-3


def _fail(prop: str, text: str) -> Violation:
    return Violation(prop, f"{prop}: {text}")


def _describe(r: Request, trace: Trace) -> str:
    i = trace.workload.requests.index(r)
    return (
        f"request {r.request_id!r} (arrived before step {trace.workload.arrivals[i]}, "
        f"prompt of {len(r.prompt_token_ids)} tokens, max_tokens {r.params.max_tokens}"
        + (f", stop_token_ids {r.params.stop_token_ids}" if r.params.stop_token_ids else "")
        + (f", temperature {r.params.temperature} seed {r.params.seed}"
           if r.params.temperature else "")
        + ")"
    )


def _step_of_token(trace: Trace, rid: Hashable, pos: int) -> int | None:
    seen = 0
    for step, out in trace.outputs.get(rid, []):
        seen += len(out.token_ids)
        if seen > pos:
            return step
    return None


def _top(trace: Trace, rid: Hashable) -> list[Mapping[int, float]] | None:
    tops: list[Mapping[int, float]] = []
    for _, out in trace.outputs.get(rid, []):
        if out.token_ids and out.top_logprobs is None:
            return None
        tops.extend(out.top_logprobs or ())
    return tops


def check_parity(trace: Trace, judge: Judge) -> None:
    """Every request's tokens equal its tokens served alone (a prefix, if aborted or cut off)."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        rid = r.request_id
        alone = judge.oracle(r.prompt_token_ids, r.params)
        got = trace.tokens(rid)
        d = first_divergence(got, alone.tokens, observed_top=_top(trace, rid),
                             expected_top=alone.top_logprobs, mode=judge.parity,
                             tolerance=judge.tolerance)
        if d is None or d.accepted:
            continue
        cut_short = rid in trace.aborted_at or rid not in trace.finished_at
        if d.observed is None and cut_short:
            continue  # an aborted (or never finished) request: a prefix is all it owes
        step = _step_of_token(trace, rid, d.position)
        where = f"in step {step}" if step is not None else "by the time it finished"
        raise _fail(
            "parity",
            f"{_describe(r, trace)} diverged from its alone run {where}, {d.describe()}. "
            f"Alone it generated {list(alone.tokens)}; in this workload {got}.",
        )


def check_budget_finish(trace: Trace, judge: Judge | None = None) -> None:
    """Exactly max_tokens tokens, or fewer ending at the first stop token; one finishing
    output per request and nothing after it; the right finish reason."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        rid, p = r.request_id, r.params
        outs = trace.outputs.get(rid, [])
        finals = [(s, o) for s, o in outs if o.finished]
        if not finals:
            if trace.stalled:
                continue  # liveness reports it
            raise _fail("budget_finish", f"{_describe(r, trace)} never got a finishing output.")
        fin_step = finals[0][0]
        late = outs[outs.index(finals[0]) + 1:]
        if late:
            s, o = late[0]
            raise _fail(
                "budget_finish",
                f"{_describe(r, trace)} finished in step {fin_step} ({finals[0][1].finish_reason}"
                f") but got another output in step {s}: {o}. Expected nothing after finishing.",
            )
        toks = trace.tokens(rid)
        reason = finals[0][1].finish_reason
        stops = set(p.stop_token_ids)
        early = [i for i, t in enumerate(toks[:-1]) if t in stops]
        if early:
            raise _fail(
                "budget_finish",
                f"{_describe(r, trace)} generated stop token {toks[early[0]]} at position "
                f"{early[0]} but went on to {toks}. Expected it to finish there with STOP.",
            )
        if len(toks) > p.max_tokens:
            raise _fail(
                "budget_finish",
                f"{_describe(r, trace)} generated {len(toks)} tokens {toks}, finishing in step "
                f"{fin_step}. Expected at most max_tokens={p.max_tokens}.",
            )
        if p.logprobs and _top(trace, rid) is not None and len(_top(trace, rid) or []) != len(toks):
            raise _fail("budget_finish", f"{_describe(r, trace)}: top_logprobs has "
                        f"{len(_top(trace, rid) or [])} entries for {len(toks)} tokens.")
        ends_in_stop = bool(toks) and toks[-1] in stops
        if reason == FinishReason.ABORT:
            if rid not in trace.aborted_at:
                raise _fail("budget_finish", f"{_describe(r, trace)} finished with ABORT in step "
                            f"{fin_step}, but it was never aborted.")
            continue
        if ends_in_stop:
            ok = reason == FinishReason.STOP or (
                reason == FinishReason.LENGTH and len(toks) == p.max_tokens)
            expected = "STOP"
        else:
            ok = reason == FinishReason.LENGTH and len(toks) == p.max_tokens
            expected = f"LENGTH after exactly {p.max_tokens} tokens"
        if not ok:
            raise _fail(
                "budget_finish",
                f"{_describe(r, trace)} finished in step {fin_step} with {reason} after "
                f"{len(toks)} tokens {toks}. Expected {expected}.",
            )


def check_liveness(trace: Trace, judge: Judge | None = None) -> None:
    """Every request finishes within the step bound; has_work() tells the truth; no output
    for an id the engine was never given; an abort takes effect within two steps."""
    __tracebackhide__ = True
    w = trace.workload
    if trace.stalled:
        stuck = [r for r in w.requests if r.request_id not in trace.finished_at
                 and w.arrivals[w.requests.index(r)] < len(trace.steps)]
        r = stuck[0]
        raise _fail(
            "liveness",
            f"{_describe(r, trace)} had not finished after {len(trace.steps)} steps (the bound "
            f"for this workload); it had {trace.tokens(r.request_id)} so far, and "
            f"{len(stuck)} request(s) were unfinished: {[x.request_id for x in stuck]}.",
        )
    if trace.has_work_errors:
        step, text = trace.has_work_errors[0]
        raise _fail("liveness", f"before step {step}, {text}.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            continue  # the bad-input property's to report
        raise _fail("liveness", f"step {step} returned an output for request id "
                    f"{out.request_id!r}, which the engine was never given: {out}.")
    for rid, at in trace.aborted_at.items():
        done = trace.finished_at.get(rid)
        if done is None or done > at + 1:
            raise _fail(
                "liveness",
                f"request {rid!r} was aborted before step {at} but "
                + (f"only finished in step {done}" if done is not None else "never finished")
                + f". Expected its last output by step {at + 1}.",
            )


def check_bad_input(trace: Trace, judge: Judge) -> None:
    """Bad requests are refused with InvalidRequest (a ValueError) and change nothing: every
    good request still finishes with its alone tokens."""
    __tracebackhide__ = True
    w = trace.workload
    for b, refused in zip(w.bad, trace.refusals, strict=False):
        shown = b.duplicate_of if b.duplicate_of is not None else b.request.request_id
        if refused is None:
            raise _fail("bad_input", f"add_request accepted a bad request before step {b.step} "
                        f"({b.kind}: {b.request}, request_id {shown!r}). Expected InvalidRequest.")
        if not isinstance(refused, ValueError):
            raise _fail("bad_input", f"add_request refused a bad request before step {b.step} "
                        f"({b.kind}) with {type(refused).__name__}: {refused}. Expected "
                        "InvalidRequest (a ValueError).")
    side_effects = trace.bad_side_effects + (trace.has_work_errors if w.bad else [])
    if side_effects:
        step, text = side_effects[0]
        raise _fail("bad_input", f"before step {step}, {text}. Expected a refused request "
                    "to leave the engine exactly as it was.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            raise _fail("bad_input", f"step {step} returned an output for a refused request: "
                        f"{out}. Expected none.")
    if w.bad:
        try:
            check_parity(trace, judge)
            check_budget_finish(trace, judge)
        except Violation as v:
            raise _fail("bad_input", f"after refusing {len(w.bad)} bad request(s), the good "
                        f"ones changed. {v}") from None


def check_compaction(trace: Trace, judge: Judge | None = None) -> None:
    """Occupied slots are the contiguous prefix 0..n-1; no request sits in two slots; every
    occupant is a request the engine was given."""
    __tracebackhide__ = True
    known = {r.request_id for r in trace.workload.requests}
    for rec in trace.steps:
        table = rec.table or ()
        occupied = [i for i, x in enumerate(table) if x is not None]
        if occupied != list(range(len(occupied))):
            raise _fail("compaction", f"after step {rec.index} the slot table is {list(table)}: "
                        f"slots {occupied} are occupied. Expected the contiguous prefix "
                        f"0..{len(occupied) - 1}.")
        ids = [table[i] for i in occupied]
        dups = {x for x in ids if ids.count(x) > 1}
        if dups:
            raise _fail("compaction", f"after step {rec.index} request {sorted(map(str, dups))[0]}"
                        f" sits in two slots: {list(table)}. Expected one slot per request.")
        stray = [x for x in ids if x not in known]
        if stray:
            raise _fail("compaction", f"after step {rec.index} slot {ids.index(stray[0])} holds "
                        f"{stray[0]!r}, which is no request of this workload: {list(table)}.")
        if trace.max_batch_size is not None and len(ids) > trace.max_batch_size:
            raise _fail("compaction", f"after step {rec.index}, {len(ids)} slots are occupied but"
                        f" max_batch_size is {trace.max_batch_size}: {list(table)}.")
        if rec.lengths is not None and len(rec.lengths) != len(table):
            raise _fail("compaction", f"after step {rec.index} slot_lengths() has "
                        f"{len(rec.lengths)} entries but slot_table() has {len(table)}.")


def check_slot_lengths(trace: Trace, judge: Judge | None = None) -> None:
    """An unfinished occupant caches prompt + generated - 1 tokens (the last sampled token's
    KV is written by the next decode); before its first token, at most its prompt."""
    __tracebackhide__ = True
    by_id = {r.request_id: r for r in trace.workload.requests}
    generated: dict[Hashable, int] = {}
    for rec in trace.steps:
        for out in rec.outputs:
            generated[out.request_id] = generated.get(out.request_id, 0) + len(out.token_ids)
        for i, rid in enumerate(rec.table or ()):
            if rid is None or rid not in by_id or i >= len(rec.lengths or ()):
                continue
            if trace.finished_at.get(rid, rec.index + 1) <= rec.index:
                continue  # finished occupants awaiting retirement: no convention applies
            if trace.aborted_at.get(rid, rec.index + 1) <= rec.index:
                continue
            r, g = by_id[rid], generated.get(rid, 0)
            got = (rec.lengths or ())[i]
            n = len(r.prompt_token_ids)
            if g >= 1 and got != n + g - 1:
                raise _fail("slot_lengths", f"after step {rec.index}, slot {i} holds "
                            f"{_describe(r, trace)} with {g} generated token(s), caching {got} "
                            f"tokens. Expected prompt {n} + generated {g} - 1 = {n + g - 1}.")
            if g == 0 and not 0 <= got <= n:
                raise _fail("slot_lengths", f"after step {rec.index}, slot {i} holds "
                            f"{_describe(r, trace)} before its first token, caching {got} "
                            f"tokens. Expected at most its prompt, {n}.")


def check_zero_waste(trace: Trace, judge: Judge | None = None) -> None:
    """wasted_slot_steps stays 0, and a request that finished in step k holds no slot once
    step k+1 has returned."""
    __tracebackhide__ = True
    for rec in trace.steps:
        if rec.wasted:
            raise _fail("zero_waste", f"wasted_slot_steps rose by {rec.wasted} by step "
                        f"{rec.index} (slot-steps computed for finished requests; slot table "
                        f"{list(rec.table or ())}). Expected 0.")
        for rid in rec.table or ():
            done = trace.finished_at.get(rid) if rid is not None else None
            if done is not None and done < rec.index:
                raise _fail("zero_waste", f"request {rid!r} finished in step {done} but still "
                            f"holds a slot after step {rec.index}: {list(rec.table or ())}. "
                            f"Expected its slot free once step {done + 1} returned.")


def check_work_conservation(trace: Trace, judge: Judge | None = None) -> None:
    """A step never runs with a free slot while a request waits. Measured from outside:
    served(k) = slot holders after step k + requests with output in step k must reach
    min(max_batch_size, live holders before step k + waiting requests before step k)."""
    __tracebackhide__ = True
    cap = trace.max_batch_size or 0
    known = {r.request_id for r in trace.workload.requests}
    for rec in trace.steps:
        if not rec.waiting_before:
            continue
        need = min(cap, len(rec.live_holders_before) + len(rec.waiting_before))
        served = {x for x in rec.table or () if x in known}
        served |= {o.request_id for o in rec.outputs}
        if len(served) < need:
            raise _fail(
                "work_conservation",
                f"step {rec.index} served {len(served)} request(s) {sorted(map(str, served))} "
                f"while {sorted(map(str, rec.waiting_before))} waited and "
                f"{len(rec.live_holders_before)} live request(s) held slots; with "
                f"max_batch_size {cap} it should have served {need}.",
            )


Check = Callable[[Trace, Judge], None]
PROPERTIES: dict[str, Check] = {
    "parity": check_parity,
    "budget_finish": check_budget_finish,
    "liveness": check_liveness,
    "bad_input": check_bad_input,
    "compaction": check_compaction,
    "slot_lengths": check_slot_lengths,
    "zero_waste": check_zero_waste,
    "work_conservation": check_work_conservation,
}
