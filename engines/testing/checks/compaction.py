"""compaction (SlotIntrospection): occupied slots are the contiguous prefix 0..n-1, no request in
two slots, every occupant a request of the workload, every output from a slot."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.checks.needs import SLOTS
from engines.testing.judging.base import Judge
from engines.testing.recorder import StepRecord, Trace

__all__ = ["CHECK", "check_compaction"]


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


CHECK = Check("compaction", check_compaction, needs=(SLOTS,), machine=frozenset({"step"}))
