"""A toy engine that computes on a worker thread of its own, one per engine, as the
CTranslate2 and mistral.rs adapters do: step() hands the step to the thread and waits. The
thread refers to the engine, so an engine that is never closed is never freed, and its
thread lives on. It counts what is alive, for tests/testing/test_pool_release.py."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from engines.protocol import StepOutput
from examples.toy_engine import ToyEngine


class ThreadedToy(ToyEngine):
    alive: ClassVar[weakref.WeakSet[ThreadedToy]] = weakref.WeakSet()  # not yet freed
    built: ClassVar[int] = 0
    closed: ClassVar[int] = 0
    peak_open: ClassVar[int] = 0  # most engines built and not closed, at once
    peak_threads: ClassVar[int] = 0  # most threads in the process, as an engine was built

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._serve, name="threaded-toy", daemon=True)
        self._worker.start()
        cls = ThreadedToy
        cls.built += 1
        cls.alive.add(self)
        cls.peak_open = max(cls.peak_open, cls.built - cls.closed)
        cls.peak_threads = max(cls.peak_threads, threading.active_count())

    @classmethod
    def reset(cls) -> None:
        cls.built = cls.closed = cls.peak_open = cls.peak_threads = 0

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def step(self) -> list[StepOutput]:
        done = threading.Event()
        box: list[Any] = []

        def job() -> None:
            try:
                box.append(ToyEngine.step(self))
            except BaseException as exc:  # handed back to the caller's thread
                box.append(exc)
            done.set()

        self._jobs.put(job)
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return list(box[0])

    def close(self) -> None:
        if self._worker.is_alive():
            ThreadedToy.closed += 1
            self._jobs.put(None)
            self._worker.join()
