"""Planted bugs in beam search (engines.core.beams) on the reference SequentialEngine."""

from __future__ import annotations

from typing import Any

import torch

from engines.core.beams import BeamSearch
from engines.sequential import SequentialEngine


class _RawScores(BeamSearch):
    def normalise(self, logprobs: torch.Tensor, length: int) -> torch.Tensor:
        return logprobs  # the cumulative logprob, whatever the length


class BeamScoresNotLengthNormalised(SequentialEngine):
    """Finished beams are ranked (and the search stopped) by their cumulative logprob, not
    divided by length ** length_penalty: shorter beams win. Deterministic, so alone and
    batched agree; the reference engine's beams differ where beams end at different lengths
    and the normalisation decides."""

    caught_by = "beam_search"
    reference = SequentialEngine  # the suite harness compares with it

    beam_search = _RawScores


BEAM_PLANTED: list[Any] = [BeamScoresNotLengthNormalised]
