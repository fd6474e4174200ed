"""The paged engine: a block KV pool with prefix caching, chunked prefill under a token budget,
preemption by recompute. Imports only engines.core, engines.protocol and engines.models.

`engines.paged:PagedEngine` is a public spec path: the engine is in engines.paged.engine."""

from engines.paged.engine import DEFAULT_BLOCK_SIZE, DEFAULT_TOKEN_BUDGET, PagedEngine

__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_TOKEN_BUDGET", "PagedEngine"]
