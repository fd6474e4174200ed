"""Engines are expensive (vLLM's CPU engine takes ~4 s to build): reuse drained ones."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from engines.factories import EngineSpecError, check_engine
from engines.protocol import Engine
from engines.testing.recorder import is_drained

__all__ = ["EnginePool"]

W = TypeVar("W")
R = TypeVar("R")


class EnginePool:
    """Hands out drained engines from one factory; builds a new one only when none is idle.

    An engine given back broken (it raised, hung, or still holds work) is dropped.
    """

    def __init__(self, factory: Callable[[], Engine], source: str) -> None:
        self.factory = factory
        self.source = source  # names the factory in error messages
        self.built = 0
        self.build_s: float | None = None  # the fastest build so far
        self._idle: list[Engine] = []
        # What each engine has served, by id(engine): a leak across workloads is replayed
        # from it. fresh() starts every engine's entry, so a recycled id never inherits one.
        self._served: dict[int, list[Any]] = {}

    @property
    def cheap(self) -> bool:
        """Engines build fast (under 50 ms): then the suite builds a fresh one wherever that
        makes a verdict depend on the workload alone."""
        return self.build_s is not None and self.build_s < 0.05

    def fresh(self) -> Engine:
        self.built += 1
        start = time.perf_counter()
        try:
            engine = self.factory()
        except Exception as exc:
            raise EngineSpecError(
                f"{self.source}: calling the factory raised {type(exc).__name__}: {exc}"
            ) from exc
        took = time.perf_counter() - start
        self.build_s = took if self.build_s is None else min(self.build_s, took)
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
            self._served.pop(id(engine), None)

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
