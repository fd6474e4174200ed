"""Sampler bugs at low temperatures, in the reference ContinuousBatchEngine's sampler: each
serves a small temperature at another one, so its draws leave the greedy tokens far more
often than the temperature allows. The suite's other sampled requests run at 0.7 to 1.5,
where both bugs change nothing: only the `low_temperature` check sees them."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from engines.core import sampling
from engines.core.request_state import RequestState
from engines.sequential import SequentialEngine
from tests.planted.sampler import Row, Sampled, SamplerEngine

__all__ = ["TEMPERATURE_PLANTED", "FlooredAtOneHundredth", "SmallTemperatureAsOne",
           "TemperatureFloor"]


def _at(seqs: list[RequestState], temperature: Any) -> list[Any]:
    """Each row at the temperature `temperature(t)` gives for its own t (unchanged if None)."""
    rows: list[Any] = []
    for s in seqs:
        t = temperature(s.request.params.temperature)
        rows.append(s if t is None else Row(s, dataclasses.replace(s.request.params,
                                                                    temperature=t)))
    return rows


class SmallTemperatureAsOne(SamplerEngine):
    """A guard against dividing by a tiny temperature that serves it at 1.0, the default,
    instead of greedily (aphrodite's `temperatures[temperatures <= 0.0] = 1.0`, taken one step
    further to `< 5e-3`)."""

    caught_by = "low_temperature"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        return sampling.sample(logits, _at(seqs, lambda t: 1.0 if 0 < t < 5e-3 else None))


class TemperatureFloor(SamplerEngine):
    """Temperatures clamped to at least 0.1 (a floor meant to keep logits / temperature
    finite in float16): a request asking for 1e-3 is served at 0.1."""

    caught_by = "low_temperature"
    reference = SequentialEngine

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        return sampling.sample(logits, _at(seqs, lambda t: 0.1 if 0 < t < 0.1 else None))


TEMPERATURE_PLANTED: list[Any] = [SmallTemperatureAsOne, TemperatureFloor]


class FlooredAtOneHundredth(SamplerEngine):
    """CORRECT, as declared: raises temperatures below 0.01 to 0.01 (vLLM's floor) and says so
    (Capabilities.min_temperature), so the suite draws none lower."""

    caught_by = None
    reference = SequentialEngine
    CAPABILITIES = dataclasses.replace(SamplerEngine.CAPABILITIES, min_temperature=0.01)

    def _sample(self, logits: torch.Tensor, seqs: list[RequestState]) -> Sampled:
        return sampling.sample(logits, _at(seqs, lambda t: 0.01 if 0 < t < 0.01 else None))
