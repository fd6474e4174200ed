"""Continuous batching: every step retires, admits first-come-first-served, and decodes.

One step: retire aborted requests, admit waiting ones into free slots (their prefill runs in
this step and yields their first token), run one decode pass over the rows that were already
running, then retire every request that finished so its slot is free for the next step.
"""

from __future__ import annotations

import torch

from engines.protocol import StepOutput
from engines.sequence import Sequence
from engines.slotted import SlotEngine


class ContinuousBatchEngine(SlotEngine):
    name = "continuous"

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        for seq in self._take_aborts(outputs):
            self._release(seq)
        decoding = len(self.running)
        admitted: list[Sequence] = []
        prefill_logits: list[torch.Tensor] = []
        while self.waiting and self.cache.can_allocate():
            seq = self.waiting.popleft()
            prefill_logits.append(self._admit(seq))
            admitted.append(seq)
        if decoding:
            rows = self.running[:decoding]
            self._emit(self.runner.decode(self._last_tokens(rows), self.cache), rows, outputs)
        if admitted:
            self._emit(torch.stack(prefill_logits), admitted, outputs)
        # Highest slot first: the row that moves into a freed slot is then never a finished one.
        for seq in sorted((s for s in self.running if s.finished), key=lambda s: -s.slot):
            self._release(seq)
        return outputs
