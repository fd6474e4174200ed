"""Engines are expensive (vLLM's CPU engine takes ~4 s to build): reuse drained ones, and
close the ones the pool drops (an engine that computes on a thread of its own is otherwise
never freed: its thread refers to it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from engines.factories import EngineSpecError, check_engine
from engines.protocol import Engine, close
from engines.testing.recorder import is_drained

__all__ = ["EnginePool"]

# EnginePool.cheap's bounds: a build's time (wall or CPU), and the wall time a build cheap in
# CPU time may take on a loaded machine.
CHEAP_S = 0.05
CHEAP_WALL_S = 1.0

W = TypeVar("W")
R = TypeVar("R")


class EnginePool:
    """Hands out drained engines from one factory; builds a new one only when none is idle.

    An engine given back broken (it raised, hung, or still holds work) is dropped, and so is
    one given back while another is idle. A dropped engine is closed (its `close()`, where it
    has one), so the pool's engines alive at once are the idle one and those handed out.
    """

    def __init__(self, factory: Callable[[], Engine], source: str) -> None:
        self.factory = factory
        self.source = source  # names the factory in error messages
        self.built = 0
        self.build_s: float | None = None  # the fastest build so far, wall clock
        self.build_cpu_s: float | None = None  # the least CPU time a build took so far
        self._idle: list[Engine] = []
        # What each engine has served, by id(engine): a leak across workloads is replayed
        # from it. fresh() starts every engine's entry, so a recycled id never inherits one.
        self._served: dict[int, list[Any]] = {}
        self.closed = 0  # engines dropped and closed
        # The first exception a close() raised: a dropped engine's, so no verdict's, but kept
        # for whoever looks into the pool (it may hold what the engine failed to release).
        self.close_error: BaseException | None = None

    @property
    def cheap(self) -> bool:
        """Engines build fast: then the suite builds a fresh one wherever that makes a verdict
        depend on the workload alone. Fast means under 50 ms of wall time, or of this
        process's CPU time within a second of wall time: a loaded machine stretches a build's
        wall time (LoRA engines' 5-8 ms went past 50 ms under `pytest -n auto`, and a reused
        engine's prefix cache hid a planted bug), not the CPU time it takes, so the choice,
        and the verdicts that follow it, do not move with the load. An engine that builds in
        another process (a server, vLLM's engine core) takes seconds of wall time."""
        if self.build_s is None:
            return False
        if self.build_s < CHEAP_S:
            return True
        return (self.build_cpu_s is not None and self.build_cpu_s < CHEAP_S
                and self.build_s < CHEAP_WALL_S)

    def fresh(self) -> Engine:
        self.built += 1
        start, cpu = time.perf_counter(), time.process_time()
        try:
            engine = self.factory()
        except Exception as exc:
            raise EngineSpecError(
                f"{self.source}: calling the factory raised {type(exc).__name__}: {exc}"
            ) from exc
        took, took_cpu = time.perf_counter() - start, time.process_time() - cpu
        self.build_s = took if self.build_s is None else min(self.build_s, took)
        self.build_cpu_s = (took_cpu if self.build_cpu_s is None
                            else min(self.build_cpu_s, took_cpu))
        self._served[id(engine)] = []
        return check_engine(engine, self.source)

    def served(self, engine: Engine, workload: Any) -> None:
        self._served.setdefault(id(engine), []).append(workload)

    def history(self, engine: Engine) -> list[Any]:
        """What `engine` served before, oldest first."""
        return list(self._served.get(id(engine), ()))

    def acquire(self) -> tuple[Engine, bool]:
        """(engine, whether it is fresh)."""
        if self._idle:
            return self._idle.pop(), False
        return self.fresh(), True

    def release(self, engine: Engine, *, ok: bool = True) -> None:
        # One idle engine is all a sequential suite can use; keeping more only holds memory.
        if ok and not self._idle and is_drained(engine):
            self._idle.append(engine)
        else:
            self._drop(engine)

    def _drop(self, engine: Engine) -> None:
        self._served.pop(id(engine), None)
        self.closed += 1
        try:
            shutdown = close(engine)
            if shutdown is not None:
                shutdown()
        except Exception as exc:  # a broken engine may fail to close too: never a verdict
            if self.close_error is None:
                self.close_error = exc

    def close(self) -> None:
        """Close the idle engines (at the end of a session)."""
        while self._idle:
            self._drop(self._idle.pop())

    def after_history(self, earlier: Sequence[W], replay: Callable[[Engine, W], object],
                      then: Callable[[Engine], R], *, drained: bool = False) -> R | None:
        """then(engine) on a fresh engine that first replays `earlier`, oldest first, each by
        replay(engine, item); with `drained`, only if the engine is drained after them. None
        where replaying raised or left work: a different failure than the one asked about.
        How the suite confirms that a failure needs the engine's history (and the shortest
        history that does); the engine is never reused, its history is not the pool's."""
        engine = self.fresh()
        try:
            try:
                for item in earlier:
                    replay(engine, item)
            except Exception:
                return None
            if drained and not is_drained(engine):
                return None
            return then(engine)
        finally:
            self.release(engine, ok=False)
