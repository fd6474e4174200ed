"""Many LoRA adapters in one forward: per-token deltas by a gathered matmul (punica's BGMV
shape, in plain torch), no loop over adapters or rows.

Every adapter the engine serves sits in a slot 1..max_loras of stacked weights, per layer and
per packed projection of engines.paged.forward (qkv, o, gate_up, down): A [slots, R, in] and
B [slots, out, R], slot 0 all zeros (the base model). A fused projection's adapter is its
parts' side by side: A the parts' A stacked along the rank ([A_q; A_k; A_v]), B block
diagonal, so one product gives each part its own B_p (A_p x). Ranks below the slot's width R
are zero-padded (zero rows of A, zero columns of B add nothing); PEFT's scaling is folded
into B once, when the adapter is written.

A step gathers each token's A and B by its slot index and multiplies: delta = B[i] (A[i] x).
A base token gathers slot 0's zeros and gets an exact +0.0, so base rows keep the bits they
had without LoRA; a step with no adapter row skips all of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engines.core.lora import LoraWeights

# The packed projections and the PEFT modules each is made of, in its output order.
PARTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "qkv": (("q_proj",), ("k_proj",), ("v_proj",)),
    "o": (("o_proj",),),
    "gate_up": (("gate_proj",), ("up_proj",)),
    "down": (("down_proj",),),
}
DEFAULT_MAX_LORAS = 8
DEFAULT_MAX_LORA_RANK = 16  # vLLM's default max_lora_rank


class LoraStacks:
    """The stacked weights of every served adapter, and their slots."""

    def __init__(self, shapes: Sequence[dict[str, tuple[int, tuple[int, ...]]]], *,
                 max_loras: int, max_rank: int, device: torch.device, dtype: torch.dtype) -> None:
        """`shapes`: per layer, per packed projection, (in features, each part's out)."""
        if max_loras < 1 or max_rank < 1:
            raise ValueError(f"max_loras {max_loras} and max_lora_rank {max_rank} must be >= 1")
        self.max_loras, self.max_rank = max_loras, max_rank
        self.shapes = shapes
        slots = max_loras + 1
        # layer -> projection -> (A [slots, parts * R, in], B [slots, out, parts * R])
        self.stacks = [
            {name: (torch.zeros(slots, len(outs) * max_rank, fan_in, device=device, dtype=dtype),
                    torch.zeros(slots, sum(outs), len(outs) * max_rank, device=device,
                                dtype=dtype))
             for name, (fan_in, outs) in layer.items()}
            for layer in shapes]
        self.free = list(range(1, slots))  # slots no adapter holds, lowest first

    def scaled_b(self, weights: LoraWeights, b: torch.Tensor) -> torch.Tensor:
        """B with the adapter's scaling folded in (planted bugs override it)."""
        return b * weights.scaling

    def load(self, weights: LoraWeights) -> int:
        """Write an adapter into the lowest free slot; its index."""
        if weights.rank > self.max_rank:
            raise ValueError(f"lora: {weights.path!r} has rank {weights.rank}, above this "
                             f"engine's max_lora_rank {self.max_rank}")
        if not self.free:
            raise ValueError(f"lora: all {self.max_loras} adapter slots (max_loras) are in use")
        known = {(layer, name) for layer in range(len(self.shapes)) for parts in PARTS.values()
                 for (name,) in parts}
        unknown = sorted(f"layer {w[0]} {w[1]}" for w in weights.modules if w not in known)
        if unknown:
            raise ValueError(f"lora: {weights.path!r} targets {', '.join(unknown)}, which this "
                             "forward does not compute (served: "
                             f"{', '.join(n for parts in PARTS.values() for (n,) in parts)})")
        slot = self.free.pop(0)
        self.write(slot, weights)
        return slot

    def write(self, slot: int, weights: LoraWeights) -> None:
        r = self.max_rank
        with torch.no_grad():
            for layer, stacks in enumerate(self.stacks):
                for proj, (a_stack, b_stack) in stacks.items():
                    a_stack[slot].zero_()
                    b_stack[slot].zero_()
                    row = 0
                    for p, (name,) in enumerate(PARTS[proj]):
                        out = self.shapes[layer][proj][1][p]
                        pair = weights.modules.get((layer, name))
                        if pair is not None:
                            a, b = pair
                            rank = a.shape[0]
                            a_stack[slot, p * r : p * r + rank] = a
                            b_stack[slot, row : row + out, p * r : p * r + rank] = \
                                self.scaled_b(weights, b)
                        row += out

    def unload(self, slot: int) -> None:
        """Free a slot; its weights are zeroed, so nothing of the adapter outlives it."""
        with torch.no_grad():
            for stacks in self.stacks:
                for a_stack, b_stack in stacks.values():
                    a_stack[slot].zero_()
                    b_stack[slot].zero_()
        self.free.append(slot)
        self.free.sort()

    def delta(self, layer: int, proj: str, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Each token's B (A x) for its own slot: x [T, in], index [T] -> [T, out]."""
        a_stack, b_stack = self.stacks[layer][proj]
        xa = torch.bmm(a_stack.index_select(0, index), x.unsqueeze(-1))  # [T, parts*R, 1]
        return torch.bmm(b_stack.index_select(0, index), xa).squeeze(-1)
