"""Continuous batching: every step retires, admits first-come-first-served, and decodes.

One step: retire aborted requests, admit waiting ones into free slots, run one forward pass
that decodes the rows already running and prefills the admitted prompts (yielding their first
token), then retire every request that finished so its slot is free for the next step.
"""

from __future__ import annotations

from engines.protocol import StepOutput
from engines.slot.engine import SlotEngine


class ContinuousBatchEngine(SlotEngine):
    name = "continuous"

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        for seq in self._take_aborts(outputs):
            self._release(seq)
        decoding = list(self.running)
        admitted = self._admit()
        if decoding or admitted:
            # Admitted prompts are prefilled in the same forward pass as the decode rows.
            logits = self._forward(decoding, admitted)
            self._emit(logits, decoding + admitted, outputs)
        # Highest slot first: the row that moves into a freed slot is then never a finished one.
        for seq in sorted((s for s in self.running if s.finished), key=lambda s: -s.slot):
            self._release(seq)
        return outputs


# At the precision engines are deployed at: the suite judges them tie-aware under its default
# --parity=auto, against the reference at the same precision (engines.sequential).
def continuous_bf16() -> ContinuousBatchEngine:
    """The continuous engine in bfloat16 (weights, compute and KV cache)."""
    return ContinuousBatchEngine(dtype="bfloat16")


def continuous_bf16_invariant() -> ContinuousBatchEngine:
    """continuous_bf16 in its batch-invariant mode (engines.slot.invariant): every row
    computes the same bits whatever shares its step, so it declares batch_invariant and
    --parity=auto holds it to exact parity in bf16."""
    return ContinuousBatchEngine(dtype="bfloat16", batch_invariant=True)


def continuous_fp16() -> ContinuousBatchEngine:
    """The continuous engine in float16 (weights, compute and KV cache)."""
    return ContinuousBatchEngine(dtype="float16")
