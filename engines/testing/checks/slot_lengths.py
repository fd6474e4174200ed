"""slot_lengths (SlotIntrospection): an unfinished occupant caches prompt + generated - 1 tokens."""

from __future__ import annotations

from collections.abc import Hashable

from engines.testing.checks.base import Check
from engines.testing.checks.needs import SLOTS
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_slot_lengths"]


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


CHECK = Check("slot_lengths", check_slot_lengths, needs=(SLOTS,), machine=frozenset({"step"}))
