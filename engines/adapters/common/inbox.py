"""The lockstep pattern, for engines that compute on threads or an event loop of their own (a
library's scheduler, a reader thread per request, an asyncio HTTP client): whatever they
produce is put into one Inbox, from any thread, and `step()` takes it.

`take(wait)` blocks until at least one event is there (at most `wait` seconds; a server
adapter's stall timeout, or what is left until a `step_by` deadline), then takes every event
queued meanwhile. So a step is what the library produced since the previous one: tokens are
handed out when they exist (the bench's TTFT and ITL are the library's own), step() never
spins, and an engine that produces nothing is noticed within `wait`.

Used by the HTTP adapter (engines/adapters/http/stream.py and adapter.py) and the mistral.rs
adapter (a reader thread per streamed request). The CTranslate2 adapter needs the other
lockstep, engines.adapters.common.gate.Gate: its library's per-token callback blocks its
worker thread until step() lets one more decoding iteration run, so that a step is exactly
one iteration.
"""

from __future__ import annotations

import queue
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """Events from the engine's own threads, taken in order by step()."""

    def __init__(self) -> None:
        self._queue: queue.Queue[T] = queue.Queue()

    def put(self, event: T) -> None:
        """Queue one event (thread-safe; from a worker thread or a loop's callback)."""
        self._queue.put(event)

    def empty(self) -> bool:
        """Whether nothing is queued now (a look, for tests and drivers that poll)."""
        return self._queue.empty()

    def take(self, wait: float | None) -> list[T]:
        """Every event queued, in order, once there is at least one: waiting up to `wait`
        seconds for the first (None: for as long as it takes; 0: not at all). [] when none
        came in time."""
        try:
            events = [self._queue.get(block=wait != 0, timeout=wait or None)]
        except queue.Empty:
            return []
        while True:
            try:
                events.append(self._queue.get_nowait())
            except queue.Empty:
                return events
