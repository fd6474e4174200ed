"""A pure-Python engine with a modelled step cost, and a virtual clock: the harness's own tests.

The fake speaks the protocol (and slot introspection) without torch. Its tokens are
meaningless; its timing is exact: a step costs `base_s + prefill_s_per_token * admitted prompt
tokens + decode_s_per_row * decoding rows`, spent on a VirtualClock (deterministic, instant) or
slept on the wall clock. `static=True` forms a batch once and drains it, like static batching;
a huge `max_batch_size` with a per-row cost admits everyone and slows everyone (admit_everyone).

A Machine is what fakes share to model a busy host: every cost of an engine built on it, and
every timing of a FakeTimer (the SLO yardstick's stand-in), is multiplied by its `factor`,
which a test may change mid-run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from engines.protocol import FinishReason, Request, StepOutput


class Machine:
    """A host whose speed a test changes: costs are multiplied by `factor` (2.0: half speed)."""

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor


class FakeTimer:
    """The yardstick's timer (engines.bench.host.gauge.Timer) with modelled timings: a decode
    step costs `step_s`, a prefill `prefill_s`, both times the machine's factor. Counts calls."""

    def __init__(self, *, step_s: float = 0.01, prefill_s: float = 0.02, batch: int = 4,
                 prompt_len: int = 8, machine: Machine | None = None) -> None:
        self.step_s, self.prefill_s = step_s, prefill_s
        self.batch, self.prompt_len = batch, prompt_len
        self.machine = machine or Machine()
        self.basis = "fake timer"
        self.calls = 0

    def decode(self) -> float:
        self.calls += 1
        return self.step_s * self.machine.factor

    def prefill(self) -> float:
        self.calls += 1
        return self.prefill_s * self.machine.factor


class VirtualClock:
    """Time moves only when the engine spends it or the driver sleeps: runs are reproducible."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass(slots=True)
class _Seq:
    request: Request
    produced: int = 0

    @property
    def done(self) -> bool:
        return self.produced >= self.request.params.max_tokens


class FakeEngine:
    def __init__(self, *, max_batch_size: int = 4, static: bool = False, base_s: float = 0.01,
                 prefill_s_per_token: float = 0.0, decode_s_per_row: float = 0.0,
                 clock: VirtualClock | None = None, vocab_size: int = 1000,
                 max_model_len: int = 512, machine: Machine | None = None) -> None:
        self.max_batch_size = max_batch_size
        self.static = static
        self.cost = (base_s, prefill_s_per_token, decode_s_per_row)
        self.clock = clock
        self.machine = machine or Machine()
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.wasted_slot_steps = 0
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []

    def add_request(self, request: Request) -> None:
        self.waiting.append(_Seq(request))

    def has_work(self) -> bool:
        return bool(self.waiting) or any(not s.done for s in self.running)

    def slot_table(self) -> list[Hashable | None]:
        ids: list[Hashable | None] = [s.request.request_id for s in self.running]
        return ids + [None] * (self.max_batch_size - len(ids))

    def slot_lengths(self) -> list[int]:
        lengths = [len(s.request.prompt_token_ids) + s.produced - 1 for s in self.running]
        return lengths + [0] * (self.max_batch_size - len(lengths))

    def step(self) -> list[StepOutput]:
        if not self.static or all(s.done for s in self.running):
            self.running = [s for s in self.running if not s.done]
        decoding = list(self.running)
        admitted = []
        if not self.static or not self.running:
            while self.waiting and len(self.running) < self.max_batch_size:
                admitted.append(self.waiting.popleft())
                self.running.append(admitted[-1])
        base, per_token, per_row = self.cost
        prompt_tokens = sum(len(s.request.prompt_token_ids) for s in admitted)
        self._spend(base + per_token * prompt_tokens + per_row * len(decoding))
        self.wasted_slot_steps += sum(s.done for s in decoding)
        outputs = []
        for seq in [s for s in decoding if not s.done] + admitted:
            seq.produced += 1
            reason = FinishReason.LENGTH if seq.done else None
            outputs.append(StepOutput(seq.request.request_id, (seq.produced % 7,), reason))
        return outputs

    def _spend(self, seconds: float) -> None:
        seconds *= self.machine.factor
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)


def continuous() -> FakeEngine:
    """Wall-clock fake, 0.2 ms a step plus prefill:
    `--engine engines.bench.doubles.fake:continuous`."""
    return FakeEngine(base_s=2e-4, prefill_s_per_token=2e-6)


def static() -> FakeEngine:
    return FakeEngine(static=True, base_s=2e-4, prefill_s_per_token=2e-6)


def admit_everyone() -> FakeEngine:
    """Admits every waiting request at once and makes every row pay: queue wait stays at one
    step while every request slows down. `--engine engines.bench.doubles.fake:admit_everyone`."""
    return FakeEngine(max_batch_size=10**6, base_s=2e-4, decode_s_per_row=5e-5)


class LoggedEngine:
    """A protocol engine that logs its name on every step, delegating to a FakeEngine: what
    the pairing tests read the order of turns from."""

    def __init__(self, name: str, inner: FakeEngine, log: list[str]) -> None:
        self.name, self.inner, self.log = name, inner, log
        self.vocab_size, self.max_model_len = inner.vocab_size, inner.max_model_len

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def step(self) -> list[StepOutput]:
        self.log.append(self.name)
        return self.inner.step()

    def has_work(self) -> bool:
        return self.inner.has_work()
