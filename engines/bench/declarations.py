"""The bench's own optional declarations: what an engine may offer the bench beside the
engine contract (engines.protocol), read here and nowhere else. The conformance suite never
reads them.

- `compute_threads`: the CPU threads it computes with (the bench states it per engine);
- `execution`: how it computes, in words (eager, compiled, a library and its version);
- `arrival_times()`: a streaming engine's per-token arrival instants for the latest step's
  outputs, per request id (time.perf_counter());
- `step_by(deadline)`: step(), waiting for a first token only until `deadline`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from engines.protocol import StepOutput

__all__ = ["BENCH_DECLARATIONS", "ArrivalTimes", "StepBy", "arrival_times", "compute_threads",
           "execution", "step_by"]

BENCH_DECLARATIONS: Mapping[str, str] = {
    "compute_threads": "the CPU threads it computes with (the bench states it per engine)",
    "execution": "how it computes, in words: eager, compiled, a library and its version",
    "arrival_times": "a callable: when each of the latest step's tokens arrived (streaming)",
    "step_by": "a callable: step(), waiting for a first token only until a deadline",
}

ArrivalTimes = Callable[[], Mapping[Hashable, Sequence[float]]]
StepBy = Callable[[float], list[StepOutput]]


def compute_threads(engine: object) -> int | None:
    """The CPU threads the engine says it computes with (`compute_threads`), or None."""
    declared = getattr(engine, "compute_threads", None)
    if declared is None:
        return None
    if isinstance(declared, bool) or not isinstance(declared, int) or declared < 1:
        raise ValueError(f"compute_threads: {declared!r}; expected an int of at least 1")
    return declared


def execution(engine: object) -> str:
    """How the engine says it computes (`execution`, a short text; "" where it does not)."""
    declared = getattr(engine, "execution", None)
    if declared is None:
        return ""
    if not isinstance(declared, str):
        raise ValueError(f"execution: {declared!r} is not a string")
    return declared


def arrival_times(engine: object) -> ArrivalTimes | None:
    """The engine's `arrival_times()` (a streaming engine: for the latest step's outputs, per
    request id, one time.perf_counter() instant per token), or None where it has none."""
    declared = getattr(engine, "arrival_times", None)
    return declared if callable(declared) else None


def step_by(engine: object) -> StepBy | None:
    """The engine's `step_by(deadline)` (step(), waiting for a first token only until
    `deadline` on time.perf_counter()), or None where it has none."""
    declared = getattr(engine, "step_by", None)
    return declared if callable(declared) else None
