"""SlotCache: preallocated KV slots with per-slot lengths and compaction.

One buffer holds every layer's K and V, shaped [layers, 2, slots, kv_heads, max_len, head_dim].
A request owns one slot for its life, its tokens from column 0. Live slots are always the
contiguous prefix 0..n-1: when a slot is freed the last live row moves into it, so a decode step
runs on the view [:n] with nothing copied per step.
"""

from __future__ import annotations

import torch


class SlotCache:
    def __init__(
        self,
        *,
        num_layers: int,
        max_batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_len = max_len
        shape = (num_layers, 2, max_batch_size, num_kv_heads, max_len, head_dim)
        self.kv = torch.zeros(shape, device=device, dtype=dtype)
        self.lengths = [0] * max_batch_size  # tokens whose KV is cached, per slot
        self.num_active = 0

    def keys(self, layer: int) -> torch.Tensor:
        return self.kv[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.kv[layer, 1]

    def can_allocate(self) -> bool:
        return self.num_active < self.max_batch_size

    def allocate(self) -> int:
        assert self.can_allocate(), "no free slot"
        slot = self.num_active
        self.num_active += 1
        self.lengths[slot] = 0
        return slot

    def free(self, slot: int) -> int | None:
        """Free `slot`; return the slot whose row moved into it (to re-point its owner), if any."""
        last = self.num_active - 1
        assert 0 <= slot <= last, f"slot {slot} is not live (live: 0..{last})"
        moved = None
        if slot != last:
            n = self.lengths[last]
            self.kv[:, :, slot, :, :n] = self.kv[:, :, last, :, :n]
            self.lengths[slot] = n
            moved = last
        self.lengths[last] = 0
        self.num_active = last
        return moved

    def copy(self, src: int, dst: int) -> None:
        """Slot dst gets slot src's cached tokens (a forked child: engines.core.children)."""
        n = self.lengths[src]
        self.kv[:, :, dst, :, :n] = self.kv[:, :, src, :, :n]
        self.lengths[dst] = n

    def reset(self) -> None:
        self.num_active = 0
        self.lengths = [0] * self.max_batch_size
