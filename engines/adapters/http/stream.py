"""The client side of the adapter: one asyncio loop in a daemon thread, one streamed HTTP
request per engine request, and a thread-safe queue of what arrived.

The engine protocol is synchronous and stepped; a server streams on its own clock. The loop
reads every stream as bytes arrive and queues each message; the adapter's step() takes what is
queued. Abort cancels the request's reader task, which closes its connection: the client
disconnect a real server sees (vLLM aborts the request on it).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import httpx

from engines.adapters.common.inbox import Inbox

__all__ = ["Arrival", "Opened", "StreamClient", "loop"]

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """The process's one client loop, started on first use (a daemon thread: it never keeps
    the process alive)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            new = asyncio.new_event_loop()
            threading.Thread(target=new.run_forever, name="batching-engines-http",
                             daemon=True).start()
            _loop = new
        return _loop


@dataclass(frozen=True, slots=True)
class Arrival:
    """One item of the queue: a message (data), the end of a stream (data None, error None),
    or the failure that ended it. `at`: when it was read off the socket, on
    time.perf_counter() (the bench's token times: engines.bench.streaming)."""

    key: str
    data: Mapping[str, Any] | None = None
    error: BaseException | None = None
    at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True, slots=True)
class Opened:
    """The response to a request: its status, and the body where it is an error."""

    status: int
    text: str = ""


class StreamClient:
    """Streams requests to one server; everything that arrives goes to `arrivals`."""

    def __init__(self, base_url: str, *, connect_timeout: float, stall_timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.arrivals: Inbox[Arrival] = Inbox()  # taken by HTTPEngine.step (the lockstep)
        # read: the longest silence a stream may keep (a stalled server fails, never hangs).
        self._timeout = httpx.Timeout(stall_timeout, connect=connect_timeout)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._client: httpx.AsyncClient | None = None

    async def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # No connection cap: every request in flight has a stream of its own. No
            # keep-alive: a server may close an idle pooled connection just as a POST goes
            # out on it (llama-server's HTTP library closes one after 100 requests or 5 s),
            # and httpx never retries a POST, so the request would fail with "Server
            # disconnected without sending a response". A fresh local connection per request
            # costs well under a millisecond.
            self._client = httpx.AsyncClient(
                base_url=self.base_url, timeout=self._timeout,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))
        return self._client

    def open(self, key: str, path: str, body: Mapping[str, Any]) -> Future[Opened]:
        """Send a streamed POST; the future resolves once the status is known (an error
        status's body read). On 200 the stream's messages then arrive under `key`."""
        opened: Future[Opened] = Future()
        task = asyncio.run_coroutine_threadsafe(self._start(key, path, body, opened), loop())
        task.add_done_callback(lambda t: _fail_unresolved(opened, t))
        return opened

    async def _start(self, key: str, path: str, body: Mapping[str, Any],
                     opened: Future[Opened]) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._tasks[key] = me
        try:
            client = await self._http()
            async with client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode(errors="replace")
                    opened.set_result(Opened(response.status_code, text))
                    return
                opened.set_result(Opened(200))
                kind = response.headers.get("content-type", "")
                if kind.startswith("application/json"):
                    # An unstreamed response (a dialect that does not stream): one message,
                    # read whole (its text may hold characters that split lines).
                    self.arrivals.put(Arrival(key, json.loads(await response.aread())))
                    self.arrivals.put(Arrival(key))
                    return
                async for line in response.aiter_lines():
                    data = _sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        break
                    self.arrivals.put(Arrival(key, json.loads(data)))
            self.arrivals.put(Arrival(key))
        except asyncio.CancelledError:  # aborted: nobody waits for this stream any more
            raise
        except Exception as exc:
            if not opened.done():
                opened.set_exception(exc)
            else:
                self.arrivals.put(Arrival(key, error=exc))
        finally:
            self._tasks.pop(key, None)

    def cancel(self, key: str) -> None:
        """Close the stream of `key` (its reader stops; nothing more arrives for it)."""
        loop().call_soon_threadsafe(self._cancel, key)

    def _cancel(self, key: str) -> None:
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()

    def close(self) -> None:
        """Close every stream and the connection pool (safe to call twice, or from a
        finalizer)."""
        asyncio.run_coroutine_threadsafe(self._close(), loop())

    async def _close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _sse_data(line: str) -> str | None:
    # Server-sent events: "data: <payload>" lines; blank lines and comments separate them.
    if line.startswith("data:"):
        return line[5:].strip()
    return None


def _fail_unresolved(opened: Future[Opened], task: Future[None]) -> None:
    # Cancelled before the status came (abort right after add, or close): nobody reads it.
    if not opened.done():
        exc = task.exception() if not task.cancelled() else None
        opened.set_exception(exc or ConnectionAbortedError("stream cancelled before its status"))
