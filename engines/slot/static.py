"""Static batching: a batch is formed once and runs until its slowest member finishes.

The standing counter-example. Finished members keep their slots and keep being computed (the
rows are padded along, as a fixed-shape batch is); every such slot-step is counted as waste.
A request that arrives while a batch runs waits for the whole batch to drain.
"""

from __future__ import annotations

import dataclasses

from engines.protocol import StepOutput
from engines.slot.engine import SlotEngine


class StaticBatchEngine(SlotEngine):
    name = "static"
    CAPABILITIES = dataclasses.replace(SlotEngine.CAPABILITIES, expected_failed_checks={
        "zero_waste": "static batching computes finished members until the batch drains",
        "work_conservation": "requests wait for the running batch to drain, with slots free",
    })

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        self._take_aborts(outputs)  # aborted members ride along like finished ones
        if not self.running:
            admitted = self._admit()
            if admitted:
                self._emit(self._forward([], admitted), admitted, outputs)
        elif any(not seq.finished for seq in self.running):
            lengths = self.cache.lengths
            riders = [seq.slot for seq in self.running if seq.finished]
            # A rider recomputes at its final position: its KV convention stays intact.
            for slot in riders:
                lengths[slot] -= 1
            logits = self.runner.decode(self._last_tokens(self.running), self.cache)
            live = [i for i, seq in enumerate(self.running) if not seq.finished]
            self.wasted_slot_steps += len(riders)
            self._emit(logits[live], [self.running[i] for i in live], outputs)
        if all(seq.finished for seq in self.running):
            self.running.clear()  # the batch has drained: all its slots free at once
            self.cache.reset()
        return outputs


# At the precision engines are deployed at (as engines.slot.continuous's).
def static_bf16() -> StaticBatchEngine:
    """The static engine in bfloat16 (weights, compute and KV cache)."""
    return StaticBatchEngine(dtype="bfloat16")


def static_fp16() -> StaticBatchEngine:
    """The static engine in float16 (weights, compute and KV cache)."""
    return StaticBatchEngine(dtype="float16")
