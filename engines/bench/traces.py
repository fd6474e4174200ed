"""Arrival traces: seeded Poisson, constant-rate or closed arrivals over a workload, saved and
replayed exactly.

A trace fixes which requests arrive and when (seconds after the run starts), so two engines
replayed from one trace see the same requests at the same moments. Gaps are drawn at rate 1
and divided by the rate: traces of one seed at different rates are the same requests on a
stretched time axis, which keeps the capacity search's probes comparable to one another.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from engines.bench.draws import WorkItem

Process = Literal["poisson", "closed", "constant"]
AT_RATE = ("poisson", "constant")  # the processes a probe or a replay picks by name


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float  # seconds after the start of the run
    request_id: str
    item: WorkItem


@dataclass(frozen=True, slots=True)
class ArrivalTrace:
    arrivals: tuple[Arrival, ...]  # sorted by at_s
    rate: float  # offered requests/s (inf for a closed batch)
    process: Process
    seed: int

    def __len__(self) -> int:
        return len(self.arrivals)

    @property
    def span_s(self) -> float:
        return self.arrivals[-1].at_s - self.arrivals[0].at_s if self.arrivals else 0.0

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        data = {
            "rate": self.rate if np.isfinite(self.rate) else None,
            "process": self.process,
            "seed": self.seed,
            # float repr round-trips exactly through JSON: replay sees the same instants.
            "arrivals": [
                {"at_s": a.at_s, "request_id": a.request_id, "max_tokens": a.item.max_tokens,
                 "prompt_token_ids": list(a.item.prompt_token_ids)}
                for a in self.arrivals
            ],
        }
        path.write_text(json.dumps(data))
        return path

    @classmethod
    def load(cls, path: str | Path) -> ArrivalTrace:
        data = json.loads(Path(path).read_text())
        arrivals = tuple(
            Arrival(float(a["at_s"]), str(a["request_id"]),
                    WorkItem(tuple(int(t) for t in a["prompt_token_ids"]), int(a["max_tokens"])))
            for a in data["arrivals"]
        )
        rate = float("inf") if data["rate"] is None else float(data["rate"])
        return cls(arrivals, rate, data["process"], int(data["seed"]))


def _ids(n: int, tag: str) -> list[str]:
    return [f"{tag}-{i:05d}" for i in range(n)]


def _build(items: Sequence[WorkItem], gaps: np.ndarray, rate: float, process: Process,
           seed: int, tag: str) -> ArrivalTrace:
    # The first request arrives at 0, and the gaps are rescaled to average exactly 1/rate: a
    # 400-request sample's own mean gap is off by ~5%, which would misstate the offered rate.
    gaps = gaps[1:]
    if len(gaps) and np.isfinite(rate) and gaps.sum() > 0:
        gaps = gaps * (len(gaps) / rate / gaps.sum())
    times = np.concatenate([[0.0], np.cumsum(gaps)])[: len(items)]
    arrivals = tuple(Arrival(float(t), rid, item)
                     for t, rid, item in zip(times, _ids(len(items), tag), items, strict=True))
    return ArrivalTrace(arrivals, rate, process, seed)


def poisson(items: Sequence[WorkItem], rate: float, *, seed: int = 0,
            tag: str = "r") -> ArrivalTrace:
    """Exponential gaps with mean 1/rate."""
    if rate <= 0:
        raise ValueError(f"rate: must be > 0, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0, size=len(items)) / rate
    return _build(items, gaps, rate, "poisson", seed, tag)


def constant(items: Sequence[WorkItem], rate: float, *, tag: str = "r") -> ArrivalTrace:
    """Evenly spaced arrivals, 1/rate apart (GuideLLM's and vLLM's "constant" rate)."""
    if rate <= 0:
        raise ValueError(f"rate: must be > 0, got {rate}")
    return _build(items, np.ones(len(items)), rate, "constant", 0, tag)


def closed(items: Sequence[WorkItem], *, tag: str = "c") -> ArrivalTrace:
    """Every request at t=0: a closed batch."""
    return _build(items, np.zeros(len(items)), float("inf"), "closed", 0, tag)


def at_rate(items: Sequence[WorkItem], rate: float, process: str = "poisson", *, seed: int = 0,
            tag: str = "r") -> ArrivalTrace:
    """`process` (one of AT_RATE) at `rate`: what a probe and a replay run replay."""
    if process == "poisson":
        return poisson(items, rate, seed=seed, tag=tag)
    if process == "constant":
        return constant(items, rate, tag=tag)
    raise ValueError(f"--arrivals: must be one of {', '.join(AT_RATE)}, got {process!r}")
