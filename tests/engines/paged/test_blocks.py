"""The block pool's bookkeeping: reference counts, the prefix cache and its LRU eviction."""

from __future__ import annotations

import pytest

from engines.paged.blocks import BlockPool, block_key


def keys(*blocks: tuple[int, ...]) -> list[bytes]:
    out: list[bytes] = []
    for tokens in blocks:
        out.append(block_key(out[-1] if out else None, tokens))
    return out


def test_keys_name_the_whole_prefix() -> None:
    a, b = (1, 2), (3, 4)
    assert keys(a, b)[1] != keys(b, b)[1]  # same tokens after another block
    assert keys(a, b)[1] != keys(b)[0]  # same tokens at another index
    assert keys(a, b) == keys(a, b)


def test_allocate_free_and_counts() -> None:
    pool = BlockPool(4)
    got = pool.allocate(3)
    assert sorted(got) == sorted(set(got)) and pool.num_free() == 1
    assert not pool.can_allocate(2)
    pool.free(got)
    assert pool.num_free() == 4
    with pytest.raises(AssertionError, match="freed while not held"):
        pool.free(got[:1])


def test_shared_block_is_free_only_when_its_last_holder_frees_it() -> None:
    pool = BlockPool(4)
    [block] = pool.allocate(1)
    [key] = keys((1, 2))
    pool.register(block, key)
    assert pool.lookup([key]) == [block]
    pool.share([block])
    assert pool.ref_counts[block] == 2 and pool.hits == 1
    pool.free([block])
    assert pool.num_free() == 3
    pool.free([block])
    assert pool.num_free() == 4
    assert pool.lookup([key]) == [block], "a freed cached block stays findable until evicted"


def test_lookup_stops_at_the_first_miss() -> None:
    pool = BlockPool(4)
    k = keys((1,), (2,), (3,))
    b0, _, b2 = pool.allocate(3)
    pool.register(b0, k[0])
    pool.register(b2, k[2])
    assert pool.lookup(k) == [b0]


def test_eviction_takes_free_blocks_first_then_least_recently_freed_tails_first() -> None:
    pool = BlockPool(4)
    k = keys((1,), (2,), (3,))
    blocks = pool.allocate(3)
    for block, key in zip(blocks, k, strict=True):
        pool.register(block, key)
    pool.free(blocks)  # tail first: blocks[2] is the least recently freed
    [fresh] = pool.allocate(1)
    assert fresh not in blocks, "the never-cached block goes first"
    assert pool.allocate(1) == [blocks[2]]
    assert pool.lookup(k) == blocks[:2], "the evicted tail's key is forgotten"
    assert pool.allocate(2) == [blocks[1], blocks[0]]
    assert pool.lookup(k) == []


def test_first_registration_wins() -> None:
    pool = BlockPool(4)
    a, b = pool.allocate(2)
    [key] = keys((5, 6))
    pool.register(a, key)
    pool.register(b, key)  # the same prefix computed twice at once
    assert pool.lookup([key]) == [a]
    pool.free([b])
    assert pool.num_free() == 3


def test_caching_off_never_hits() -> None:
    pool = BlockPool(2, enable_prefix_caching=False)
    [block] = pool.allocate(1)
    [key] = keys((1,))
    pool.register(block, key)
    assert pool.lookup([key]) == []
