"""Slot properties, for engines with SlotIntrospection: compaction, the KV-length
convention, zero waste, and work conservation."""

from __future__ import annotations

from collections.abc import Hashable

from engines.testing.check import Check
from engines.testing.properties.base import Judge, describe
from engines.testing.recorder import StepRecord, Trace

__all__ = ["check_compaction", "check_slot_lengths", "check_work_conservation",
           "check_zero_waste"]


def check_compaction(check: Check, trace: Trace, judge: Judge) -> None:
    """Occupied slots are the contiguous prefix 0..n-1; no request sits in two slots; every
    occupant is a request the engine was given."""
    __tracebackhide__ = True
    known = {r.request_id for r in trace.workload.requests}
    for rec in trace.steps:
        table = rec.table or ()
        occupied = [i for i, x in enumerate(table) if x is not None]
        if occupied != list(range(len(occupied))):
            raise check.fail(f"after step {rec.index} the slot table is {list(table)}: "
                             f"slots {occupied} are occupied. Expected the contiguous prefix "
                             f"0..{len(occupied) - 1}.")
        ids = [table[i] for i in occupied]
        dups = {x for x in ids if ids.count(x) > 1}
        if dups:
            raise check.fail(f"after step {rec.index} request {sorted(map(str, dups))[0]}"
                             f" sits in two slots: {list(table)}. Expected one slot per request.")
        stray = [x for x in ids if x not in known]
        if stray:
            raise check.fail(f"after step {rec.index} slot {ids.index(stray[0])} holds "
                             f"{stray[0]!r}, which is no request of this workload: {list(table)}.")
        if trace.max_batch_size is not None and len(ids) > trace.max_batch_size:
            raise check.fail(f"after step {rec.index}, {len(ids)} slots are occupied but"
                             f" max_batch_size is {trace.max_batch_size}: {list(table)}.")
        size = trace.max_batch_size
        if size is not None and len(table) != size:
            raise check.fail(
                f"after step {rec.index} slot_table() has {len(table)} "
                f"entries: {list(table)}. Expected one per slot, max_batch_size {size}.")
        if rec.lengths is not None and len(rec.lengths) != len(table):
            raise check.fail(f"after step {rec.index} slot_lengths() has "
                             f"{len(rec.lengths)} entries but slot_table() has {len(table)}.")
        _outputs_come_from_slots(check, trace, rec)


def _outputs_come_from_slots(check: Check, trace: Trace, rec: StepRecord) -> None:
    """A request that got tokens in a step sat in the table before or after it. Only a
    request that was admitted, got its first token and finished within the one step may be
    in neither (retired before the table was read again)."""
    seen = set(rec.table or ()) | set(rec.table_before or ())
    for out in rec.outputs:
        if not out.token_ids or out.request_id in seen:
            continue
        first = trace.outputs[out.request_id][0][0] == rec.index
        if first and out.finished:
            continue
        raise check.fail(
            f"request {out.request_id!r} got {list(out.token_ids)} in step "
            f"{rec.index} but sat in no slot: the table was {list(rec.table_before or ())}"
            f" before the step and {list(rec.table or ())} after it.")


def check_slot_lengths(check: Check, trace: Trace, judge: Judge) -> None:
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
                raise check.fail(f"after step {rec.index}, slot {i} holds "
                                 f"{describe(r, trace)} with {g} generated token(s), caching {got} "
                                 f"tokens. Expected prompt {n} + generated {g} - 1 = {n + g - 1}.")
            if g == 0 and not 0 <= got <= n:
                raise check.fail(f"after step {rec.index}, slot {i} holds "
                                 f"{describe(r, trace)} before its first token, caching {got} "
                                 f"tokens. Expected at most its prompt, {n}.")


def check_zero_waste(check: Check, trace: Trace, judge: Judge) -> None:
    """wasted_slot_steps stays 0, and a request that finished in step k holds no slot once
    step k+1 has returned."""
    __tracebackhide__ = True
    for rec in trace.steps:
        if rec.wasted:
            raise check.fail(f"wasted_slot_steps rose by {rec.wasted} by step "
                             f"{rec.index} (slot-steps computed for finished requests; slot table "
                             f"{list(rec.table or ())}). Expected 0.")
        for rid in rec.table or ():
            done = trace.finished_at.get(rid) if rid is not None else None
            if done is not None and done < rec.index:
                raise check.fail(f"request {rid!r} finished in step {done} but still "
                                 f"holds a slot after step {rec.index}: {list(rec.table or ())}. "
                                 f"Expected its slot free once step {done + 1} returned.")


def check_work_conservation(check: Check, trace: Trace, judge: Judge) -> None:
    """A step never runs with a free slot while a request waits, and serves every request
    it holds: each live slot holder that already had its first token gets a token in the
    step. Occupancy, measured from outside: slot holders after step k + requests with output
    in step k must reach min(max_batch_size, live holders + waiting requests before step k)."""
    __tracebackhide__ = True
    cap = trace.max_batch_size or 0
    known = {r.request_id for r in trace.workload.requests}
    for rec in trace.steps:
        _holders_are_served(check, trace, rec)
        if not rec.waiting_before:
            continue
        need = min(cap, len(rec.live_holders_before) + len(rec.waiting_before))
        served = {x for x in rec.table or () if x in known}
        served |= {o.request_id for o in rec.outputs}
        if len(served) < need:
            raise check.fail(
                f"step {rec.index} served {len(served)} request(s) {sorted(map(str, served))} "
                f"while {sorted(map(str, rec.waiting_before))} waited and "
                f"{len(rec.live_holders_before)} live request(s) held slots; with "
                f"max_batch_size {cap} it should have served {need}.",
            )




def _holders_are_served(check: Check, trace: Trace, rec: StepRecord) -> None:
    got = {o.request_id for o in rec.outputs if o.token_ids or o.finished}
    for rid in sorted(rec.live_holders_before, key=str):
        started = any(s < rec.index for s, _ in trace.outputs.get(rid, []))
        if started and rid not in got and trace.aborted_at.get(rid, rec.index + 1) > rec.index:
            raise check.fail(f"request {rid!r} held a slot and was decoding "
                             f"before step {rec.index}, but got no token in it (outputs: "
                             f"{rec.outputs}). Expected every running request to be served each "
                             "step.")
