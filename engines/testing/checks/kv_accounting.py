"""kv_accounting (KVIntrospection, block pools): every block is either held or free, a request
holds exactly the blocks its cached tokens need (no fewer, and no more than the extra the
engine declares in `kv_extra_blocks`), blocks are shared only as full prefix blocks over the
same tokens, and a drained engine holds nothing (as vLLM's own tests assert of an empty
scheduler).

Children of a request with n > 1 (listed under engines.protocol.child_key, each with its own
tokens: the prompt, then its own outputs) may also share a partially filled block
copy-on-write, at the same index, if every position any of them has cached in it holds the
same token in each: a child that wrote its own token into a block its sibling still reads
fails, and so does a block freed while a sibling holds it (held + free exceeds the pool).
Unrelated requests still share full prefix blocks only.

The rows of a beam search (beam_width > 1, listed under child_key(request_id, row)) report
no tokens until the search ends, and a row may take another's history at any step: the
suite knows only their prompt. So their tables are held to the same accounting (held + free,
blocks for what they cache, none twice, none left after the drain) and to the prompt, and
two rows of one search may share a block at the same index whatever they cached past the
prompt, which the suite cannot see (counted: "beam rows' shared blocks past the prompt,
contents not judged")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

from engines.protocol import child_key
from engines.testing.checks.base import Check
from engines.testing.checks.needs import KV
from engines.testing.coverage import Coverage, Tally
from engines.testing.crash import EngineCrashed
from engines.testing.features.beams import FEATURE as BEAMS_FEATURE
from engines.testing.features.beams import FIT_VARIANTS
from engines.testing.features.children import FEATURE as CHILDREN_FEATURE
from engines.testing.judging.base import Judge, Violation
from engines.testing.recorder import KVSnapshot, Trace

__all__ = ["CHECK", "TALLY", "check_kv_accounting"]


Beams = dict[Hashable, tuple[int, int]]  # a beam row's key -> (prompt length, max_tokens)
# The counter of blocks two rows of one search shared past their prompt (not judged there).
PAST_PROMPT = "beam rows' shared blocks past the prompt (contents not judged)"


def _beam_rows(trace: Trace) -> Beams:
    """Each beam search's row keys: all the suite knows of a row is its prompt and budget."""
    rows: Beams = {}
    for r in trace.workload.requests:
        for i in range(r.params.beam_width if r.params.beam_width > 1 else 0):
            rows[child_key(r.request_id, i)] = (len(r.prompt_token_ids), r.params.max_tokens)
    return rows


def _streams(trace: Trace, upto: int) -> dict[Hashable, tuple[int, ...]]:
    """Each request's tokens known after step `upto`: its prompt, then its outputs (each
    child of a request with n > 1: its own outputs, under its child_key). Beam searches'
    rows are not here (`_beam_rows`)."""
    out = {}
    for r in trace.workload.requests:
        if r.params.beam_width > 1:
            continue
        rid, n = r.request_id, r.params.n
        kids = n if isinstance(n, int) and n > 1 else 0
        gen: dict[int, list[int]] = {i: [] for i in range(max(kids, 1))}
        for s, o in trace.outputs.get(rid, []):
            if s <= upto and (o.index in gen or not kids):
                gen.setdefault(o.index, []).extend(o.token_ids)
        if not kids:
            out[rid] = (*r.prompt_token_ids, *(t for ts in gen.values() for t in ts))
            continue
        for i in range(kids):
            out[child_key(rid, i)] = (*r.prompt_token_ids, *gen[i])
    return out


def _siblings(a: Hashable, b: Hashable, streams: dict[Hashable, tuple[int, ...]]) -> bool:
    """Whether two table keys are children of one request (both child keys the suite knows:
    a plain request id never is)."""
    return (a in streams and b in streams and isinstance(a, tuple) and isinstance(b, tuple)
            and len(a) == len(b) == 2 and a[0] == b[0] and child_key(a[0], a[1]) == a)


def _shared_partial(a: Hashable, b: Hashable, j: int, jb: int, bs: int, kv: KVSnapshot,
                    streams: dict[Hashable, tuple[int, ...]]) -> bool:
    """A partial block two children may share copy-on-write: the same index, and the same
    token at every position either has cached in it."""
    if j != jb or not _siblings(a, b, streams):
        return False
    upto = min(max(kv.cached.get(a, 0), kv.cached.get(b, 0)), (j + 1) * bs)
    sa, sb = streams[a], streams[b]
    return len(sa) >= upto and len(sb) >= upto and sa[:upto] == sb[:upto]


def _beam_share(a: Hashable, b: Hashable, j: int, jb: int, bs: int, kv: KVSnapshot,
                beams: Beams) -> bool | None:
    """Whether two rows of one beam search share a block as rows may: at the same index (a
    row that takes another's history takes its table, block for block). Their prompt is
    the same, and past it the suite cannot see what either cached. None if a and b are not
    rows of one search."""
    if a not in beams or b not in beams or a[0] != b[0]:  # type: ignore[index]
        return None
    return j == jb


def _judge_snapshot(check: Check, kv: KVSnapshot, streams: dict[Hashable, tuple[int, ...]],
                    beams: Beams, when: str) -> int:
    """Raises on a violation; the blocks beam rows shared past their prompt (not judged)."""
    held = {b for table in kv.tables.values() for b in table}
    if len(held) + kv.free != kv.total:
        raise check.fail(f"{when}, {len(held)} block(s) are held and "
                         f"{kv.free} free, but the pool has {kv.total}: blocks "
                         + ("leaked." if len(held) + kv.free < kv.total else
                         "counted free while still held."))
    owners: dict[int, list[tuple[Hashable, int]]] = defaultdict(list)
    bs = kv.block_size
    for rid, table in kv.tables.items():
        if len(set(table)) != len(table):
            raise check.fail(f"{when}, request {rid!r} holds a block twice: {table}.")
        cached = kv.cached.get(rid, 0)
        need = -(-cached // bs)
        if len(table) < need:
            raise check.fail(f"{when}, request {rid!r} caches {cached} tokens in "
                             f"{len(table)} block(s) of {bs}: it needs {need}.")
        if len(table) > need + kv.extra:
            allowed = (f" plus the {kv.extra} extra the engine declares (kv_extra_blocks)"
                       if kv.extra else " (the engine declares no kv_extra_blocks)")
            raise check.fail(f"{when}, request {rid!r} holds {len(table)} block(s) "
                             f"of {bs} for {cached} cached token(s): at most {need} are "
                             f"needed{allowed}. The others hold none of its tokens' KV: pool "
                             "memory taken from other requests.")
        stream = streams.get(rid)
        if rid in beams and cached > sum(beams[rid]) - 1:
            raise check.fail(f"{when}, beam row {rid!r} caches {cached} tokens but a row "
                             f"of its search holds at most {sum(beams[rid]) - 1} (its prompt "
                             "and max_tokens, the last not computed).")
        if stream is not None and cached > len(stream):
            raise check.fail(f"{when}, request {rid!r} caches {cached} tokens but "
                             f"only {len(stream)} exist (prompt and generated).")
        for j, block in enumerate(table):
            owners[block].append((rid, j))
    past_prompt = 0
    for block, users in owners.items():
        if len(users) < 2:
            continue
        (a, ja), *rest = users
        for b, jb in rest:
            end = (ja + 1) * bs
            rows = _beam_share(a, b, ja, jb, bs, kv, beams)
            if rows is not None:
                if not rows:
                    raise check.fail(f"{when}, block {block} is held by beam rows {a!r} (as "
                                     f"its block {ja}) and {b!r} (as its block {jb}): a row "
                                     "that takes another's history takes its blocks at the "
                                     "same places.")
                prompt = beams[a][0]
                past_prompt += end > prompt and max(kv.cached.get(a, 0),
                                                    kv.cached.get(b, 0)) > prompt
                continue
            sa, sb = streams.get(a, ()), streams.get(b, ())
            same = ja == jb and len(sa) >= end and len(sb) >= end and sa[:end] == sb[:end]
            full = min(kv.cached.get(a, 0), kv.cached.get(b, 0)) >= end
            if not (same and full) and not _shared_partial(a, b, ja, jb, bs, kv, streams):
                raise check.fail(
                    f"{when}, block {block} is held by {a!r} (as its "
                    f"block {ja}) and by {b!r} (as its block {jb}), but it is not a full "
                    f"block of a prefix both share: tokens up to {end} "
                    f"{'agree' if same else 'differ'}, cached "
                    f"{kv.cached.get(a, 0)} and {kv.cached.get(b, 0)}"
                    + (" (children of one request may share a partial block only while "
                       "every position either has cached in it holds the same token: "
                       "copy-on-write)." if _siblings(a, b, streams) else "."))
    return past_prompt


def check_kv_accounting(check: Check, trace: Trace, judge: Judge) -> dict[str, int]:
    """Held + free blocks add up to the pool after every step; each request holds the blocks
    its cached tokens need (ceil(cached / block size), plus at most the engine's declared
    kv_extra_blocks) and never a block twice; a block in two tables is a full shared
    prefix block at the same index over the same tokens; after the drain, nothing is held.
    The same for the workload's run on every config variant with a KV view of its own."""
    __tracebackhide__ = True
    judged = {PAST_PROMPT: _judge_trace(check, trace, "")}
    for name, source in judge.kv_variants.items():
        try:
            other = judge.variants[name](trace.workload)
        except EngineCrashed as exc:
            raise check.fail(f"variant {name!r} crashed on this workload: "
                             f"{exc}") from None
        try:
            _judge_trace(check, other, f"on variant {name!r}, ")
        except Violation as bad:
            # The report's script builds every variant and judges them as the run did
            # (engines.testing.rerun): it says this again; the source says which build it is.
            raise Violation(bad.prop, f"{bad}\n\nVariant {name!r} is built by:\n\n"
                            f"{source}") from None
        judged[f"preemptions on variant {name}"] = other.exercised.get("preemptions", 0)
    return judged


def _add(coverage: Coverage, counts: dict[str, int], check: str) -> None:
    """The preemptions each KV variant counted over the workloads judged on it (the engine's
    own are in its exercised() counters), and the beam rows' blocks shared past the prompt."""
    for name, n in counts.items():
        coverage.counts[name] += n


TALLY = Tally(_add)


def _judge_trace(check: Check, trace: Trace, where: str) -> int:
    __tracebackhide__ = True
    beams = _beam_rows(trace)
    past_prompt = 0
    for rec in trace.steps:
        if rec.kv is not None:
            past_prompt += _judge_snapshot(check, rec.kv, _streams(trace, rec.index), beams,
                                           f"{where}after step {rec.index}")
    last = trace.kv_after_drain
    if last is None or trace.stalled:
        return past_prompt
    if last.tables or last.free != last.total:
        raise check.fail(f"{where}after every request finished and has_work() turned "
                         f"False, {sorted(map(str, last.tables))} still hold blocks and "
                         f"{last.free} of {last.total} are free. Expected every block free or "
                         "evictable.")
    return past_prompt


# Children and beams: copy-on-write and forked block tables are where KV accounting breaks.
CHECK = Check("kv_accounting", check_kv_accounting, needs=(KV,),
              draws=(CHILDREN_FEATURE.use(),
                                            BEAMS_FEATURE.use(FIT_VARIANTS)), tally=TALLY)
