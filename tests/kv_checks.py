"""KV-pool accounting for the repo's paged-engine tests: checked after every step through
KVIntrospection only, with each request's tokens as its outputs show them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from engines.protocol import FinishReason, KVIntrospection, Request, StepOutput, capabilities_of
from tests.helpers import drain

Results = dict[Hashable, tuple[list[int], FinishReason | None]]


def check_kv(engine: KVIntrospection, streams: dict[Hashable, tuple[int, ...]],
             when: str) -> None:
    """Held + free == total; tables hold the blocks their cached tokens need (no more than
    the engine's declared kv_extra_blocks beyond) and no block twice; a block in two tables
    is a full block at the same index over equal tokens."""
    __tracebackhide__ = True
    tables, cached = engine.kv_block_tables(), engine.kv_cached_tokens()
    bs, total = engine.kv_block_size, engine.kv_total_blocks
    held = {b for table in tables.values() for b in table}
    assert all(0 <= b < total for b in held), f"{when}: block ids outside 0..{total - 1}"
    assert len(held) + engine.kv_free_blocks() == total, (
        f"{when}: {len(held)} held + {engine.kv_free_blocks()} free != {total}")
    owners: dict[int, list[tuple[Hashable, int]]] = defaultdict(list)
    for rid, table in tables.items():
        assert len(set(table)) == len(table), f"{when}: {rid!r} holds a block twice: {table}"
        need = -(-cached[rid] // bs)
        assert len(table) >= need, f"{when}: {rid!r} caches {cached[rid]} " \
            f"tokens in {len(table)} blocks"
        assert len(table) <= need + capabilities_of(engine).kv_extra_blocks, (
            f"{when}: {rid!r} holds {len(table)} blocks for {cached[rid]} cached tokens")
        assert cached[rid] <= len(streams[rid]), f"{when}: {rid!r} caches more than it has"
        for j, block in enumerate(table):
            owners[block].append((rid, j))
    for block, users in owners.items():
        (a, ja), *rest = users
        end = (ja + 1) * bs
        for b, jb in rest:
            assert ja == jb, f"{when}: block {block} at index {ja} of {a!r}, {jb} of {b!r}"
            assert min(cached[a], cached[b]) >= end, f"{when}: shared block {block} not full"
            assert streams[a][:end] == streams[b][:end], f"{when}: block {block} shared " \
                f"by {a!r} and {b!r} over different tokens"


def drain_checked(engine: KVIntrospection, requests: Iterable[Request], *,
                  late: Mapping[int, Sequence[Request]] | None = None,
                  on_step: Callable[[int, list[StepOutput]], None] | None = None) -> Results:
    """tests.helpers.drain, checking the KV accounting after every step and after the drain
    (no tables left, every block free or evictable). `late[k]`: requests added after step k."""
    requests = list(requests)
    streams = {r.request_id: tuple(r.prompt_token_ids) for r in requests}

    def after(step: int, outputs: list[StepOutput]) -> None:
        for out in outputs:
            streams[out.request_id] += tuple(out.token_ids)
        if on_step is not None:
            on_step(step, outputs)
        check_kv(engine, streams, f"after step {step}")
        for r in (late or {}).get(step, ()):
            streams[r.request_id] = tuple(r.prompt_token_ids)
            engine.add_request(r)  # type: ignore[attr-defined]

    results = drain(engine, requests, on_step=after)  # type: ignore[arg-type]
    assert not engine.kv_block_tables(), f"tables left after the drain: {engine.kv_block_tables()}"
    assert engine.kv_free_blocks() == engine.kv_total_blocks, "blocks held after the drain"
    return results
