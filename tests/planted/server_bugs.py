"""Planted leaks on a live server, for the drain check: the fake server (tests/fake_server.py)
counting every finished request as still running, or leaving KV usage behind per request.
The tokens are right, so no token check sees them; only the server's own count does. And
planted tenant bugs in the fake server's prefix cache, for the isolation check over HTTP
(a salt left out of its key, salted requests never cached): only the server's count of each
request's cached prompt tokens shows them.

Each is a zero-argument factory over one fake server of its own (started at the first call,
in a thread): a new adapter each call, as the suite's factories give.
"""

from __future__ import annotations

from typing import Any

from engines.adapters.http import HTTPEngine
from engines.adapters.http.vllm_lora import VLLMServerEngine
from tests import fake_server

__all__ = ["SERVER_CONTROL", "SERVER_PLANTED", "TENANT_CONTROL", "TENANT_PLANTED",
           "PlantedServer", "TenantServer"]


class PlantedServer:
    """A factory over a fake server with `leak` ("" for the correct control)."""

    def __init__(self, name: str, leak: str, doc: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.leak = leak
        self.caught_by = "drain" if leak else None  # the control is no planted bug
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


# Tenant isolation over HTTP, judged from the server's own per-request count of cached prompt
# tokens (the isolation check's counts flavour): the fake server with a prefix cache of
# 4-token blocks, a 128-token context, two LoRA adapters (by name: it runs none) and cache
# salts, behind the adapter for vLLM's server with tenants.
TENANT_ADAPTERS = {"fake-lora-a": "/adapters/a", "fake-lora-b": "/adapters/b"}


class TenantServer:
    """A factory over a fake server with a prefix cache and `bug` ("" for the control)."""

    def __init__(self, name: str, bug: str, doc: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.bug = bug
        self.caught_by = "isolation" if bug else None  # the control is no planted bug
        self._url: str | None = None
        self._server: Any = None

    def __call__(self) -> VLLMServerEngine:
        if self._url is None:
            # A context the suite's workload of one prompt under every tenant fits in.
            state = fake_server.State(triggers=False, loras=dict(TENANT_ADAPTERS),
                                      prefix_block=4, prefix_bug=self.bug, max_model_len=128)
            self._server, _ = fake_server.serve(state=state)
            self._url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return VLLMServerEngine(self._url, loras=TENANT_ADAPTERS, vocab_size=fake_server.VOCAB,
                                drain_timeout=0.0, load_settle=0.5)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server, self._url = None, None


SaltIgnoredServer = TenantServer(
    "SaltIgnoredServer", "salt",
    "The server's prefix cache keys blocks without the cache salt: a salted request is "
    "handed KV another salt's (or no salt's) request computed.")
SaltedNeverCachedServer = TenantServer(
    "SaltedNeverCachedServer", "salted",
    "The server never caches a salted request's blocks: salts isolate by caching nothing.")
TENANT_PLANTED = [SaltIgnoredServer, SaltedNeverCachedServer]
TENANT_CONTROL = TenantServer("CorrectTenantServer", "", "The fake server's prefix cache, "
                              "keyed by adapter and salt.")
