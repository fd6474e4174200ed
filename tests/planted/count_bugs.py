"""Tenant bugs seen the way a server shows them: the paged engine behind a view with no block
tables (no KVIntrospection), only its own count of the prompt tokens each request took from
its prefix cache (StepOutput.cached_prompt_tokens). The `isolation` check must catch a prefix
key that ignores the salt, and isolation had by caching nothing for salted tenants, from the
counts alone (engines.testing.judging.tenant_counts), as it would over HTTP.

COUNT_PLANTED: the factories, each naming the check that catches it (`caught_by`, its bug's);
COUNT_CONTROL: the correct engine behind the same view.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from engines.paged import PagedEngine
from engines.protocol import (
    Capabilities,
    Engine,
    Request,
    StepOutput,
    capabilities_of,
    loras,
)
from tests.planted.lora_bugs import SaltIgnored, TenantsNeverCached

__all__ = ["COUNT_CONTROL", "COUNT_PLANTED", "CountsOnly"]


class CountsOnly:
    """`inner` through the engine protocol, Abortable and its declarations, without its
    block tables or slots: what a server over HTTP lets the suite see."""

    def __init__(self, inner: PagedEngine) -> None:
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.max_model_len = inner.max_model_len

    def capabilities(self) -> Capabilities:
        """The inner engine's fields, outputs and concurrency (not its tokenizer)."""
        own = capabilities_of(self.inner)
        return Capabilities(supported_sampling=own.supported_sampling,
                            output_fields=own.output_fields,
                            max_concurrency=own.max_concurrency)

    @property
    def loras(self) -> dict[str, str]:
        return loras(self.inner)

    def add_request(self, request: Request) -> None:
        self.inner.add_request(request)

    def step(self) -> list[StepOutput]:
        return self.inner.step()

    def has_work(self) -> bool:
        return self.inner.has_work()

    def abort_request(self, request_id: Hashable) -> None:
        self.inner.abort_request(request_id)


def _factory(cls: type[PagedEngine], name: str) -> Callable[[], Engine]:
    def make() -> Engine:
        return CountsOnly(cls())

    make.__name__ = make.__qualname__ = name
    make.caught_by = getattr(cls, "caught_by", None)  # type: ignore[attr-defined]
    return make


salt_ignored_counts = _factory(SaltIgnored, "salt_ignored_counts")
tenants_never_cached_counts = _factory(TenantsNeverCached, "tenants_never_cached_counts")
paged_counts = _factory(PagedEngine, "paged_counts")

COUNT_PLANTED: list[Callable[[], Engine]] = [salt_ignored_counts, tenants_never_cached_counts]
COUNT_CONTROL = paged_counts
