"""Replay an arrival trace on an engine, on a clock, recording when every token came out.

Open loop: a request joins (add_request) as soon as its arrival time has passed, however busy
the engine is; the driver never waits for the engine to ask. Closed: the whole workload at
t=0, 2 warm-up and 5 recorded runs, as in the serving series' continuous-batching part
(docs/references.md). The engine is seen only through the protocol; slot tables are
recorded when the engine offers them. An engine that streams (a server) may report when each
token arrived (engines.bench.streaming): on the wall clock, those instants are its token times.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Generator, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from engines.bench.devices import Sync
from engines.bench.streaming import token_times
from engines.bench.traces import ArrivalTrace
from engines.protocol import Engine


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep_until(self, t: float) -> None: ...


class WallClock:
    is_perf_counter = True  # now() is time.perf_counter(): arrival instants map onto it

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        delay = t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


@dataclass(slots=True)
class StepTiming:
    start_s: float  # relative to the run's start
    end_s: float
    n_tokens: int
    first_token_of: tuple[str, ...]  # requests whose first token came from this step
    slots: tuple[Hashable | None, ...] | None  # slot table after the step, if offered


@dataclass(slots=True)
class Run:
    engine: str
    trace: ArrivalTrace
    steps: list[StepTiming] = field(default_factory=list)
    added_s: dict[str, float] = field(default_factory=dict)  # when add_request was called
    token_steps: dict[str, list[int]] = field(default_factory=dict)  # step index per token
    # A streaming engine's token arrival times (s after the start), where it reports them:
    # they replace the end of the step that returned each token (engines.bench.metrics).
    token_times: dict[str, list[float]] = field(default_factory=dict)
    origin_s: float = 0.0  # the clock's reading at the start (WallClock: time.perf_counter())
    finish_reason: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0  # first arrival to the end of the last step
    step_s: float = 0.0  # inside engine.step()
    idle_s: float = 0.0  # sleeping for the next arrival with nothing to do
    wasted_slot_steps: int | None = None  # delta over the run, if the engine counts it
    gave_up: bool = False  # stopped admitting: a request waited past give_up_wait_s
    id_suffix: str = ""  # appended to the trace's request ids for this run

    @property
    def driver_s(self) -> float:
        """The driver's own time: everything that was neither a step nor a deliberate sleep."""
        return max(0.0, self.wall_s - self.step_s - self.idle_s)

    @property
    def overhead(self) -> float:
        return self.driver_s / self.step_s if self.step_s else 0.0


def _wasted(engine: Engine) -> int | None:
    value = getattr(engine, "wasted_slot_steps", None)
    return int(value) if isinstance(value, int) else None


def run_trace(
    engine: Engine,
    trace: ArrivalTrace,
    *,
    name: str = "engine",
    clock: Clock | None = None,
    record_slots: bool = False,
    give_up_wait_s: float | None = None,
    id_suffix: str = "",
    sync: Sync | None = None,
) -> Run:
    """Replay `trace` open-loop on `engine` (which must be drained) and record every token.

    give_up_wait_s: once an added request has gone that long without a first token, stop
    admitting (the run is past capacity) and drain what is in flight, so a capacity probe far
    above capacity ends early. The run is marked `gave_up`.
    """
    steps = drive(engine, trace, name=name, clock=clock or WallClock(),
                  record_slots=record_slots, give_up_wait_s=give_up_wait_s,
                  id_suffix=id_suffix, sync=sync)
    with gc_paused():
        while True:
            try:
                next(steps)
            except StopIteration as done:
                run: Run = done.value
                return run


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside a timed run, as timeit does: with a bench's worth
    of records alive, one full collection pauses ~0.1 s, which an open-loop run at 150 req/s
    sees as a burst of 15 queued requests, enough to fail a capacity probe."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def drive(
    engine: Engine,
    trace: ArrivalTrace,
    *,
    name: str,
    clock: Clock,
    record_slots: bool = False,
    give_up_wait_s: float | None = None,
    id_suffix: str = "",
    sync: Sync | None = None,
) -> Generator[None, None, Run]:
    """`run_trace` one step at a time: yields after every engine step, returns the Run. Lets
    a caller interleave several engines' runs (engines.bench.paired).

    sync: called before and after every step (engines.bench.devices: CUDA synchronize), so a
    step's time covers the device work it queued.
    """
    run = Run(name, trace, id_suffix=id_suffix)
    slot_table: Callable[[], Sequence[Hashable | None]] | None = (
        getattr(engine, "slot_table", None) if record_slots else None
    )
    wasted0 = _wasted(engine)
    pending = deque(trace.arrivals)
    waiting_first: dict[str, float] = {}  # added, no token yet -> added at (insertion-ordered)
    token_steps = run.token_steps
    t0 = run.origin_s = clock.now()
    streamed = token_times(engine, clock, t0)
    while True:
        # Compare absolute instants: (t0 + at) - t0 can round below `at`, and then a sleep
        # until t0 + at would never make the request due.
        now_abs = clock.now()
        now = now_abs - t0
        while pending and t0 + pending[0].at_s <= now_abs:
            arrival = pending.popleft()
            rid = arrival.request_id + id_suffix
            engine.add_request(arrival.item.to_request(rid))
            run.added_s[rid] = now
            waiting_first[rid] = now
            token_steps[rid] = []
        if give_up_wait_s is not None and pending and waiting_first:
            if now - next(iter(waiting_first.values())) > give_up_wait_s:
                run.gave_up = True
                pending.clear()
        if not engine.has_work():
            if not pending:
                break
            idle_from = clock.now()
            clock.sleep_until(t0 + pending[0].at_s)
            run.idle_s += clock.now() - idle_from
            continue
        if sync is not None:
            sync()
        start = clock.now()
        if streamed is not None:  # wait for tokens only until the next request is due
            outputs = streamed.step(pending[0].at_s if pending else None)
        else:
            outputs = engine.step()
        if sync is not None:
            sync()
        end = clock.now()
        run.step_s += end - start
        if streamed is not None:
            streamed.record(outputs, run.token_times)
        index = len(run.steps)
        firsts = []
        n_tokens = 0
        for out in outputs:
            rid = str(out.request_id)
            steps = token_steps[rid]
            if out.token_ids:
                if not steps:
                    firsts.append(rid)
                    waiting_first.pop(rid, None)
                steps.extend([index] * len(out.token_ids))
                n_tokens += len(out.token_ids)
            if out.finish_reason is not None:
                run.finish_reason[rid] = out.finish_reason.value
                waiting_first.pop(rid, None)
        slots = tuple(slot_table()) if slot_table else None
        run.steps.append(StepTiming(start - t0, end - t0, n_tokens, tuple(firsts), slots))
        yield
    run.wall_s = clock.now() - t0
    wasted1 = _wasted(engine)
    if wasted0 is not None and wasted1 is not None:
        run.wasted_slot_steps = wasted1 - wasted0
    return run
