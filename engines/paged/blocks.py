"""The block KV pool's bookkeeping: which block ids are free, held (and how often), or cached.

No tensors here: engines.paged.forward owns the KV memory, indexed by these block ids.

A block is in exactly one of three states:
- held: ref_count > 0, in one or more requests' block tables;
- cached: held by nobody but full of a known prefix (it has a key); kept for reuse and
  evicted least-recently-freed first when a fresh block is needed;
- free: held by nobody, no key.

Prefix keys chain: a full block's key is a digest of the previous block's key and its own
token ids, so it names the whole prefix up to the block's end (the KV of a token depends on
every token before it). BLAKE2b-256: an accidental collision would silently hand a request
another prefix's KV, so the key is a cryptographic digest, not Python's 64-bit hash.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence

BlockKey = bytes


def block_key(parent: BlockKey | None, tokens: Sequence[int]) -> BlockKey:
    """The key of a full block holding `tokens`, after the prefix whose last block's key is
    `parent` (None for a request's first block)."""
    digest = hashlib.blake2b(parent or b"", digest_size=32)
    digest.update(array("q", tokens).tobytes())
    return digest.digest()


class BlockPool:
    def __init__(self, num_blocks: int, *, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, unheld; LRU first
        self._by_key: dict[BlockKey, int] = {}
        self._key_of: dict[int, BlockKey] = {}
        self.hits = 0  # blocks handed out from the prefix cache, ever

    def num_free(self) -> int:
        """Blocks no request holds: free, or cached and evictable."""
        return len(self._free) + len(self._evictable)

    def can_allocate(self, n: int) -> bool:
        return n <= self.num_free()

    def allocate(self, n: int) -> list[int]:
        """n fresh blocks, each held once: free ones first, then the least recently freed
        cached ones (their keys are forgotten)."""
        assert self.can_allocate(n), f"{n} blocks asked, {self.num_free()} free"
        blocks = []
        for _ in range(n):
            if self._free:
                block = self._free.popleft()
            else:
                block, _ = self._evictable.popitem(last=False)
                del self._by_key[self._key_of.pop(block)]
            assert self.ref_counts[block] == 0
            self.ref_counts[block] = 1
            blocks.append(block)
        return blocks

    def lookup(self, keys: Sequence[BlockKey]) -> list[int]:
        """The cached blocks for the longest prefix of `keys` (nothing is taken yet)."""
        found = []
        if self.enable_prefix_caching:
            for key in keys:
                block = self._by_key.get(key)
                if block is None:
                    break
                found.append(block)
        return found

    def share(self, blocks: Sequence[int]) -> None:
        """Take cached blocks (from lookup) into one more request's table."""
        for block in blocks:
            if self.ref_counts[block] == 0:
                del self._evictable[block]
            self.ref_counts[block] += 1
        self.hits += len(blocks)

    def hold(self, blocks: Sequence[int]) -> None:
        """One more hold on blocks already held (a child forked from its sibling's table)."""
        for block in blocks:
            assert self.ref_counts[block] > 0, f"block {block} forked while not held"
            self.ref_counts[block] += 1

    def register(self, block: int, key: BlockKey) -> None:
        """`block` was just filled: cache it under `key`. If an equal block is cached already
        (two requests computed the same prefix at once), that one stays the cached copy."""
        if self.enable_prefix_caching and key not in self._by_key:
            assert block not in self._key_of, f"block {block} is already cached"
            self._by_key[key] = block
            self._key_of[block] = key

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one hold on each block. Last block first, so a request's tail is evicted
        before its head (heads are the prefixes other requests share)."""
        for block in reversed(blocks):
            assert self.ref_counts[block] > 0, f"block {block} freed while not held"
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                if block in self._key_of:
                    self._evictable[block] = None
                else:
                    self._free.append(block)
