"""A planted slowdown, to prove that a regression gate has bite: BENCH_SLOWDOWN=0.1 makes every
step of the default engines 10% slower (`name=0.1,other=0.2` targets engines by name).

The wrapper spins, after each step, for the given fraction of that step's own time: a
proportional slowdown at any step size, on the wall clock the bench times (sleep is too coarse
for a millisecond step). Never set it outside such a demonstration; the CLI and asv print it
when it is active.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engines.protocol import Engine, Request, StepOutput

ENV = "BENCH_SLOWDOWN"


def planted(name: str, spec: str | None = None) -> float:
    """The fraction BENCH_SLOWDOWN (or `spec`) plants for engine `name`; 0 when none."""
    spec = os.environ.get(ENV, "") if spec is None else spec
    for part in filter(None, (p.strip() for p in spec.split(","))):
        target, sep, value = part.rpartition("=")
        if not sep or target == name:
            try:
                fraction = float(value)
            except ValueError:
                raise ValueError(
                    f"{ENV}: expected FRACTION or NAME=FRACTION, got {part!r}") from None
            if fraction < 0:
                raise ValueError(f"{ENV}: fraction must be >= 0, got {fraction}")
            return fraction
    return 0.0


class SlowedEngine:
    """Engine `inner`, every step `fraction` slower; everything else passes through."""

    def __init__(self, inner: Engine, fraction: float) -> None:
        self._inner = inner
        self.fraction = fraction
        self.vocab_size = inner.vocab_size
        self.max_model_len = inner.max_model_len

    def __getattr__(self, name: str) -> Any:  # slot_table, wasted_slot_steps, ...
        return getattr(self._inner, name)

    def add_request(self, request: Request) -> None:
        self._inner.add_request(request)

    def has_work(self) -> bool:
        return self._inner.has_work()

    def step(self) -> list[StepOutput]:
        start = time.perf_counter()
        outputs = self._inner.step()
        until = time.perf_counter() + self.fraction * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return outputs
