"""One request's state in the paged engine: its block table and how far its KV is computed;
a beam search's group of rows (engines.paged.beams)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from engines.core.beams import BeamSearch
from engines.core.request_state import RequestState
from engines.paged.blocks import BlockKey

KeyFn = Callable[[BlockKey | None, Sequence[int]], BlockKey]


@dataclass(slots=True, eq=False)
class PagedRequest(RequestState):
    # Logical block j holds tokens j*block_size .. (j+1)*block_size-1: prompt, then generated.
    blocks: list[int] = field(default_factory=list)
    # Tokens whose KV is in `blocks`. Decoding: every token but the last sampled one.
    # Reset to 0 by preemption: the request is then recomputed from its tokens so far.
    num_computed: int = 0
    num_registered: int = 0  # leading full blocks already offered to the prefix cache
    keys: list[BlockKey] = field(default_factory=list)  # prefix keys of leading full blocks
    chunked: bool = False  # its prefill has taken more than one step (counted once)
    seat: int = -1  # while running: its row of the forward's persistent block tables
    # The parent of its first block's prefix key: what besides tokens its KV depends on or
    # must not be shared across (its adapter, its cache salt); None for neither.
    root: BlockKey | None = None
    lora_slot: int = 0  # its adapter's slot in the forward's LoRA stacks (0: base)
    # Speculation's draft model (engines.paged.drafters): positions whose draft KV is in
    # the draft pool. Truncated with num_computed, reset by preemption.
    draft_computed: int = 0
    family: int = 1  # its request's n: above 1, KV introspection lists it by child_key
    # Beam search: the group of rows this one is a beam of (engines.paged.beams), else None.
    group: BeamGroup | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt_token_ids) + len(self.output)

    @property
    def num_pending(self) -> int:
        """Tokens to compute before the next token can be sampled (1 when decoding)."""
        return self.num_tokens - self.num_computed

    def tokens(self, start: int, end: int) -> list[int]:
        """Token ids start..end-1 of prompt + generated, without copying the whole history."""
        prompt = self.request.prompt_token_ids
        p = len(prompt)
        if start >= p:
            return self.output[start - p : end - p]
        return list(prompt[start:end]) + self.output[: max(0, end - p)]

    def prefix_keys(self, n_blocks: int, block_size: int, key: KeyFn) -> list[BlockKey]:
        """Keys of the first n_blocks full blocks (computed once, kept)."""
        while len(self.keys) < n_blocks:
            j = len(self.keys)
            parent = self.keys[-1] if self.keys else self.root
            self.keys.append(key(parent, self.tokens(j * block_size, (j + 1) * block_size)))
        return self.keys[:n_blocks]


@dataclass(eq=False, slots=True)
class BeamGroup:
    """A beam search's rows in the paged engine (engines.paged.beams)."""

    search: BeamSearch
    children: list[PagedRequest]  # the request's children 0..n-1 (row 0 is child 0)
    rows: list[PagedRequest]  # row i holds search.beams[i]
    spare: list[int] = field(default_factory=list)  # seats held for rows to come
    # Each row's next-token log-softmax, kept until every row has its own (recompute).
    logprobs: dict[PagedRequest, torch.Tensor] = field(default_factory=dict)
