"""One request's sequences in OpenVINO GenAI's continuous batching, as the protocol's children
(StepOutput.index): n > 1 samples (num_return_sequences) and beam search (num_beams).

What the library's handle gives (openvino-genai 2026.4.1, its step loop):
- sampled n > 1: `read()` maps each sequence's id to the tokens it gained since the last read;
  the ids are the request's own (0..n-1 in order of forking), so a child's index is the rank
  of its id among the ids seen at the first read (every child is forked at the prompt's end
  and gains its first token in the same step). The children draw from one generator, the
  request's (`rng_seed`), so a seeded request's children are reproducible as a whole.
- beam search: nothing until the request has finished; then `read()` gives EVERY beam
  (num_beams of them, not the num_return_sequences asked for), each with its whole tokens and
  its `score`, the cumulative logprob / generated length ** length_penalty. So the adapter
  reads a beam request only once it has finished, and returns the n best scores, best first,
  as children 0..n-1 (the protocol's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Child", "Sequences"]


class Output(Protocol):
    """The fields of the library's GenerationOutput read here."""

    generated_ids: Sequence[int]
    generated_log_probs: Sequence[float]
    score: float
    finish_reason: Any


@dataclass(slots=True)
class Child:
    """One child's tokens this step (its logprobs beside them) and whether it finished."""

    index: int
    tokens: list[int]
    logprobs: list[float]
    finish: Any  # the library's finish reason of the sequence (NONE while running)


@dataclass(slots=True)
class Sequences:
    n: int  # children the protocol asked for
    beams: bool  # beam search: read once, finished, n best of every beam
    _index: dict[int, int] = field(default_factory=dict)  # sequence id -> child index

    def children(self, outputs: Mapping[int, Output]) -> list[Child]:
        """The children this read gives: sampled ones as they grow, beams at the end."""
        if self.beams:
            best = sorted(outputs.values(), key=lambda o: -float(o.score))[:self.n]
            return [Child(i, [int(t) for t in o.generated_ids],
                          [float(v) for v in o.generated_log_probs], o.finish_reason)
                    for i, o in enumerate(best)]
        for seq_id in sorted(outputs):
            if seq_id not in self._index:
                self._index[seq_id] = len(self._index)
        return [Child(self._index[s], [int(t) for t in o.generated_ids],
                      [float(v) for v in o.generated_log_probs], o.finish_reason)
                for s, o in sorted(outputs.items(), key=lambda kv: self._index[kv[0]])]
