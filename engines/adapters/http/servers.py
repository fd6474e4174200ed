"""The servers the tests launch: vLLM's OpenAI server (from the vLLM venv) and llama.cpp's
llama-server (the binary $BATCHING_LLAMA_SERVER names), each on a preset converted by
engines.adapters.http.convert. The factories over them are engines.adapters.http.variants.

The suite builds engines many times; a server takes minutes to start. So a launched server is
started once per process and configuration, at the first call, and every later call returns
the same one (each new adapter over it first waits for the server to be drained of requests
other adapters left behind).
"""

from __future__ import annotations

import os
from pathlib import Path

from engines.adapters.http.convert import gguf_model, server_checkpoint
from engines.adapters.http.launch import PORT, Server, launch

__all__ = ["LLAMA_SERVER", "VLLM_PYTHON", "llama_server_binary", "llama_server_process",
           "vllm_python", "vllm_server_process"]

# The vLLM venv's python: ci/vllm-env.sh builds .venv-vllm (relative paths: to the cwd).
VLLM_PYTHON = "BATCHING_VLLM_PYTHON"
_DEFAULT_PYTHON = ".venv-vllm/bin/python"
LLAMA_SERVER = "BATCHING_LLAMA_SERVER"  # the llama-server binary
# vLLM's CPU server start-up took up to 5 min on a busy 2-core machine.
START_TIMEOUT = "BATCHING_SERVER_START_TIMEOUT"

_servers: dict[tuple[object, ...], Server] = {}


def vllm_python() -> Path:
    """The python of the vLLM venv, or a clear error saying how to get one."""
    path = Path(os.environ.get(VLLM_PYTHON) or _DEFAULT_PYTHON)
    if not path.is_file():
        raise FileNotFoundError(
            f"{VLLM_PYTHON}: no vLLM python at {str(path)!r} (from {os.getcwd()}): build the "
            f"venv with `bash ci/vllm-env.sh` or set {VLLM_PYTHON} to its bin/python")
    return path


def vllm_server_process(preset: str = "tiny", *, seed: int = 0,
                        max_num_seqs: int = 8, max_model_len: int | None = None,
                        prefix_caching: bool = False, block_size: int | None = None,
                        num_blocks: int | None = None,
                        max_num_batched_tokens: int | None = None,
                        extra: tuple[str, ...] = ()) -> Server:
    """This process's vLLM server over the preset with this configuration (launched at the
    first call). num_blocks: usable KV blocks (vLLM adds its null block); set, it replaces
    the pool VLLM_CPU_KVCACHE_SPACE would give. max_num_batched_tokens: chunked prefill under
    that per-step token budget."""
    from engines.models import preset_max_model_len

    max_model_len = max_model_len or preset_max_model_len(preset) or 512
    key = (preset, seed, max_num_seqs, max_model_len, prefix_caching, block_size, num_blocks,
           max_num_batched_tokens, extra)
    server = _servers.get(key)
    if server is not None and server.alive:
        return server
    python = vllm_python()
    ckpt = server_checkpoint(preset, seed=seed)
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(ckpt),
        "--served-model-name", preset, "--host", "127.0.0.1", "--port", PORT,
        "--dtype", "float32", "--enforce-eager", "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(max_num_seqs), "--seed", str(seed),
        # Off by default as in engines.adapters.vllm:make_engine: nothing carries over
        # between requests unless a variant asks for it.
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
        # Each request's cached prompt tokens in its usage (the adapter's
        # StepOutput.cached_prompt_tokens, for the isolation check): reporting only.
        "--enable-prompt-tokens-details",
    ]
    if block_size is not None:
        argv += ["--block-size", str(block_size)]
    if num_blocks is not None:
        argv += ["--num-gpu-blocks-override", str(num_blocks + 1)]
    if max_num_batched_tokens is not None:
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens",
                 str(max_num_batched_tokens)]
    argv += list(extra)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    timeout = float(os.environ.get(START_TIMEOUT) or 600)
    server = launch(argv, env=env, timeout=timeout, name=f"vllm-{preset}")
    _servers[key] = server
    return server


def llama_server_binary() -> Path:
    """The llama-server binary, or a clear error saying how to get one."""
    value = os.environ.get(LLAMA_SERVER)
    if not value:
        raise FileNotFoundError(
            f"{LLAMA_SERVER} is not set: build llama-server with `bash ci/llama-server-env.sh` "
            f"(its last line is the binary) and set {LLAMA_SERVER} to it")
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise FileNotFoundError(f"{LLAMA_SERVER}: {value!r} is not an executable file")
    return path


def llama_server_process(preset: str = "tiny", *, seed: int = 0, slots: int = 4,
                         extra: tuple[str, ...] = (), bpe: bool = False, outtype: str = "f32",
                         cache_type: str = "f32", flash_attn: str = "off") -> Server:
    """This process's llama-server over the preset with `slots` parallel slots, each with the
    preset's context (launched at the first call); `bpe`: its GGUF's vocabulary is the
    presets' byte-level BPE (engines.adapters.http.convert.gguf_model). `outtype` (the GGUF's
    weights: gguf_convert.OUTTYPES), `cache_type` (K and V) and `flash_attn` default to the
    exact configuration; the deployment-precision variants (llama_variants) set them."""
    from engines.models import preset_max_model_len

    ctx = preset_max_model_len(preset) or 512
    key = (preset, seed, slots, extra, bpe, outtype, cache_type, flash_attn)
    server = _servers.get(key)
    if server is not None and server.alive:
        return server
    binary = llama_server_binary()
    model = gguf_model(preset, seed=seed, binary=binary, bpe=bpe, outtype=outtype)
    argv = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", PORT,
        # -c is the whole KV cache; each slot gets ctx tokens of it.
        "-c", str(ctx * slots), "--parallel", str(slots), "--no-kv-unified",
        # By default attention in F32, as the weights: an F32 KV cache (the server's default
        # is F16) and no flash attention, which casts K and V to F16 even from an F32 cache
        # (llama-graph.cpp; upstream's choice, llama.cpp PR 12825). Either alone put logprobs
        # 4e-3 to 2e-2 off the F32 reference and flipped greedy near-ties; without both,
        # within 1e-5.
        "--cache-type-k", cache_type, "--cache-type-v", cache_type, "--flash-attn", flash_attn,
        # One thread: the machine's other core belongs to the benchmarks (and the reference).
        # No --seed: it is the seed of every request that names none, which would make all
        # unseeded requests draw alike (`seed` is the preset's weights', not sampling's).
        "-t", "1", "-tb", "1", "--no-webui",
        # /metrics and /slots: what the server says it runs (the drain check reads them).
        "--metrics", "--slots", *extra,
    ]
    timeout = float(os.environ.get(START_TIMEOUT) or 300)
    server = launch(argv, timeout=timeout, name=f"llama-server-{preset}")
    _servers[key] = server
    return server
