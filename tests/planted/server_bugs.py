"""Planted leaks on a live server, for the drain check: the fake server (tests/fake_server.py)
counting every finished request as still running, or leaving KV usage behind per request.
The tokens are right, so no token check sees them; only the server's own count does.

Each is a zero-argument factory over one fake server of its own (started at the first call,
in a thread): a new adapter each call, as the suite's factories give.
"""

from __future__ import annotations

from typing import Any

from engines.adapters.http import HTTPEngine
from tests import fake_server

__all__ = ["SERVER_CONTROL", "SERVER_PLANTED", "PlantedServer"]


class PlantedServer:
    """A factory over a fake server with `leak` ("" for the correct control)."""

    def __init__(self, name: str, leak: str, doc: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.leak = leak
        self.caught_by = "drain"
        self._url: str | None = None
        self.state: fake_server.State | None = None
        self._server: Any = None

    def __call__(self) -> HTTPEngine:
        if self._url is None:
            self._server, self.state = fake_server.serve(
                state=fake_server.State(leak=self.leak, triggers=False))
            self._url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A leaked "running" request never drains: a new adapter need not wait for it.
        return HTTPEngine(self._url, vocab_size=fake_server.VOCAB, drain_timeout=0.0,
                          load_settle=0.5)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server, self._url = None, None


LeavesRequestRunning = PlantedServer(
    "LeavesRequestRunning", "running",
    "Every request that finished stays counted as running on the server (a request the "
    "scheduler never retires after its stream ended).")
LeavesKVBehind = PlantedServer(
    "LeavesKVBehind", "kv",
    "Every finished request leaves KV usage behind (blocks never returned to the pool).")
SERVER_PLANTED = [LeavesRequestRunning, LeavesKVBehind]
SERVER_CONTROL = PlantedServer("CorrectServer", "", "The fake server, leaking nothing.")
