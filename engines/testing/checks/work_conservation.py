"""work_conservation (SlotIntrospection): a step never runs with a free slot while a request
waits, and serves every request it holds."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.checks.needs import SLOTS
from engines.testing.judging.base import Judge
from engines.testing.recorder import StepRecord, Trace

__all__ = ["CHECK", "check_work_conservation"]


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


CHECK = Check("work_conservation", check_work_conservation, needs=(SLOTS,))
