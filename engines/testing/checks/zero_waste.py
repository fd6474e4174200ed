"""zero_waste (SlotIntrospection): no slot-step computed for a finished request, and a request
that finished in step k holds no slot once step k+1 has returned."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.checks.needs import SLOTS
from engines.testing.judging.base import Judge
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_zero_waste"]


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


CHECK = Check("zero_waste", check_zero_waste, needs=(SLOTS,), machine=frozenset({"step"}))
