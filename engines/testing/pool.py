"""Engines are expensive (vLLM's CPU engine takes ~4 s to build): reuse drained ones."""

from __future__ import annotations

from collections.abc import Callable

from engines.protocol import Engine
from engines.testing.driver import is_drained
from engines.testing.loading import EngineSpecError, check_engine

__all__ = ["EnginePool"]


class EnginePool:
    """Hands out drained engines from one factory; builds a new one only when none is idle.

    An engine given back broken (it raised, hung, or still holds work) is dropped.
    """

    def __init__(self, factory: Callable[[], Engine], source: str) -> None:
        self.factory = factory
        self.source = source  # names the factory in error messages
        self.built = 0
        self.cheap = False  # set when a build is known to be fast: then build freely
        self._idle: list[Engine] = []

    def fresh(self) -> Engine:
        self.built += 1
        try:
            engine = self.factory()
        except Exception as exc:
            raise EngineSpecError(
                f"{self.source}: calling the factory raised {type(exc).__name__}: {exc}"
            ) from exc
        return check_engine(engine, self.source)

    def acquire(self) -> tuple[Engine, bool]:
        """(engine, whether it is fresh)."""
        if self._idle:
            return self._idle.pop(), False
        return self.fresh(), True

    def release(self, engine: Engine, *, ok: bool = True) -> None:
        # One idle engine is all a sequential suite can use; keeping more only holds memory.
        if ok and not self._idle and is_drained(engine):
            self._idle.append(engine)
