"""Tenant isolation, for engines with KVIntrospection that serve LoRA adapters or cache salts:
no cached KV block is shared by requests of different tenants (a tenant is the adapter's
directory, or its name where none is declared, and the salt), and the isolation is not had
by caching nothing.

Sharing is read from the block tables: a block id in two requests' tables in one snapshot
(after one step) is shared. Only blocks held at once count: a block freed by one request and
later handed to another is either a cache hit or a recycled free block, and its id does not
say which (parity judges the tokens of such a hit).

A hit is demanded of a same-tenant repeat B of an earlier request A (the same prompt, both
without prompt_logprobs, which engines may serve without their cache) where A provably had
its full prompt blocks computed and held when B was admitted: in the snapshot before the
step B first holds blocks, A caches every full block of the shared prompt (its last token
aside), and in that step's snapshot A still holds the same block ids. Even then an engine
that does not prefix-cache (or not while the first request runs) shares nothing, so the
demand is made only where the base tenant's own repeat (the control, no adapter, no salt)
shared under the same condition in the same run: the engine demonstrably caches, and a
tenant that does not share where the base tenant does is isolated by caching nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.coverage import Coverage, Tally
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import KVSnapshot, Trace

__all__ = ["TALLY", "Judged", "check_isolation"]

BASE = (None, None)


@dataclass(frozen=True, slots=True)
class Judged:
    repeats: int  # same-tenant repeats judged for a hit (a control hit in the run)
    unjudged_repeats: int  # eligible repeats not judged: no control hit in the run
    controls: int  # control repeats that shared (the engine caches)
    cross_pairs: int  # pairs of different tenants holding a common full prefix block at once


def _tenant(trace: Trace, r: Request) -> tuple[str | None, str | None]:
    return trace.lora_paths.get(r.request_id, r.lora), r.cache_salt


def _who(r: Request) -> str:
    return f"{r.request_id!r} (adapter {r.lora!r}, cache_salt {r.cache_salt!r})"


def _no_sharing(check: Check, trace: Trace, requests: Mapping[Hashable, Request]) -> int:
    """Raise on a block shared across tenants; the cross-tenant pairs that could have shared
    (both holding a first full block over the same tokens, at once)."""
    pairs: set[tuple[Hashable, Hashable]] = set()
    for rec in trace.steps:
        kv = rec.kv
        if kv is None:
            continue
        owners: dict[int, list[Hashable]] = defaultdict(list)
        for rid, table in kv.tables.items():
            for block in table:
                owners[block].append(rid)
        for block, rids in owners.items():
            known = [requests[r] for r in rids if r in requests]
            for i, a in enumerate(known):
                for b in known[i + 1:]:
                    if _tenant(trace, a) != _tenant(trace, b):
                        raise check.fail(
                            f"after step {rec.index}, block {block} is held by {_who(a)} and "
                            f"by {_who(b)}: KV cached for one tenant was handed to another "
                            f"({describe(a, trace)}; {describe(b, trace)}).")
        bs = kv.block_size
        held = [requests[r] for r in kv.tables if r in requests and kv.cached.get(r, 0) >= bs]
        for i, a in enumerate(held):
            for b in held[i + 1:]:
                if (_tenant(trace, a) != _tenant(trace, b)
                        and len(a.prompt_token_ids) > bs and len(b.prompt_token_ids) > bs
                        and a.prompt_token_ids[:bs] == b.prompt_token_ids[:bs]):
                    pairs.add((a.request_id, b.request_id))
    return len(pairs)


def _first_held(trace: Trace, rid: Hashable) -> int | None:
    for i, rec in enumerate(trace.steps):
        if rec.kv is not None and rec.kv.tables.get(rid):
            return i
    return None


def _could_hit(a: Request, prev: KVSnapshot, cur: KVSnapshot, full: int) -> bool:
    """A held its first `full` blocks computed before the step and kept them through it."""
    rid = a.request_id
    before, after = prev.tables.get(rid, ()), cur.tables.get(rid, ())
    return (prev.cached.get(rid, 0) >= full * prev.block_size and len(before) >= full
            and tuple(after[:full]) == tuple(before[:full]))


def _repeats(trace: Trace) -> list[tuple[Request, bool]]:
    """Each same-tenant repeat that could have hit (see the module's condition), and whether
    it shares a block with an earlier request of its tenant."""
    w = trace.workload
    order = {r.request_id: i for i, r in enumerate(w.requests)}
    out = []
    for b in w.requests:
        s = _first_held(trace, b.request_id)
        if s is None or s == 0 or b.params.prompt_logprobs:
            continue
        prev, cur = trace.steps[s - 1].kv, trace.steps[s].kv
        assert prev is not None and cur is not None
        bs = cur.block_size
        mine = set(cur.tables[b.request_id])
        eligible = shared = False
        for a in w.requests:
            if (order[a.request_id] >= order[b.request_id] or a.params.prompt_logprobs
                    or _tenant(trace, a) != _tenant(trace, b)):
                continue
            full = (min(len(a.prompt_token_ids), len(b.prompt_token_ids)) - 1) // bs
            if full < 1 or a.prompt_token_ids[:full * bs] != b.prompt_token_ids[:full * bs]:
                continue
            if _could_hit(a, prev, cur, full):
                eligible = True
                shared = shared or bool(mine & set(cur.tables[a.request_id][:full]))
        if eligible:
            out.append((b, shared))
    return out


def check_isolation(check: Check, trace: Trace, judge: Judge) -> Judged:
    """No block held at once by requests of different tenants (adapter, cache salt); and where
    the base tenant's repeat of a running request's prompt shared its blocks, every other
    tenant's repeat under the same condition shares its own tenant's (module docstring)."""
    __tracebackhide__ = True
    requests = {r.request_id: r for r in trace.workload.requests}
    cross = _no_sharing(check, trace, requests)
    repeats = _repeats(trace)
    controls = sum(1 for r, shared in repeats if _tenant(trace, r) == BASE and shared)
    others = [(r, shared) for r, shared in repeats if _tenant(trace, r) != BASE]
    if not controls:
        return Judged(0, len(others), 0, cross)
    for r, shared in others:
        if not shared:
            raise check.fail(
                f"{describe(r, trace)}, {_who(r)}, repeats the prompt of an earlier request of "
                "its own tenant that held its full prompt blocks, computed, when it was "
                "admitted, and shares none of them; the base tenant's repeat shared under the "
                "same condition in this run. The engine caches, but not for this tenant: "
                "isolation by caching nothing.")
    return Judged(len(others), 0, controls, cross)


def _add(coverage: Coverage, judged: Judged, check: str) -> None:
    c = coverage.counts
    c[f"{check}: repeats judged for a hit"] += judged.repeats
    c[f"{check}: repeats not judged"] += judged.unjudged_repeats
    c[f"{check}: control hits"] += judged.controls
    c[f"{check}: cross-tenant pairs"] += judged.cross_pairs
    c[f"{check}: workloads"] += 1


def _notes(data: Mapping[str, int], check: str) -> list[str]:
    if not data.get(f"{check}: workloads"):
        return []
    get = lambda key: data.get(f"{check}: {key}", 0)  # noqa: E731
    out = [f"{check} (block tables): {get('cross-tenant pairs')} pair(s) of requests of "
           "different tenants holding a common first block's prompt at once judged for no "
           "shared block; "
           f"{get('repeats judged for a hit')} same-tenant repeat(s) judged for a prefix-cache "
           f"hit, where the base tenant's control shared ({get('control hits')} control "
           "hit(s))"]
    if get("repeats not judged"):
        out.append(f"{check}: {get('repeats not judged')} same-tenant repeat(s) could have hit "
                   "but were not judged: the base tenant's repeat shared nothing in their run "
                   "(the engine does not prefix-cache there, so no hit is demanded)")
    if not get("repeats judged for a hit"):
        out.append(f"{check}: by the block tables, no hit was demanded in any workload (no "
                   "control hit), so "
                   "'no sharing' may hold by caching nothing")
    return out


TALLY = Tally(_add, _notes)
