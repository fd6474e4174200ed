"""Zero-argument factories over servers: one the tests launch (vLLM's OpenAI server on a
preset checkpoint) and one the user points at (a URL in the environment).

The suite builds engines many times; a server takes minutes to start. So a launched server is
started once per process, at the first factory call, and every later call returns a new
adapter over the same server (each new adapter first waits for the server to be drained of
requests other adapters left behind).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engines.adapters.http.adapter import HTTPEngine
from engines.adapters.http.launch import PORT, Server, launch

__all__ = ["VLLM_PYTHON", "from_env", "vllm_adapter", "vllm_python", "vllm_server",
           "vllm_server_process"]

# The vLLM venv's python: ci/vllm-env.sh builds .venv-vllm (relative paths: to the cwd).
VLLM_PYTHON = "BATCHING_VLLM_PYTHON"
_DEFAULT_PYTHON = ".venv-vllm/bin/python"
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
    from engines.adapters.http.checkpoint import server_checkpoint
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


def vllm_adapter(server: Server, *, preset: str = "tiny", seed: int = 0,
                 max_concurrency: int = 8, refuse_seeded: str | None = None) -> HTTPEngine:
    """A new adapter over a launched vLLM server on the preset."""
    from engines.adapters.http.checkpoint import server_checkpoint

    ckpt = server_checkpoint(preset, seed=seed)
    vocab = int(json.loads((ckpt / "config.json").read_text())["vocab_size"])
    # vLLM's --max-logprobs default: it refuses more only inside the stream.
    return HTTPEngine(server.url, vocab_size=vocab, max_concurrency=max_concurrency,
                      max_logprobs=20, refuse_seeded=refuse_seeded, log=str(server.log))


def vllm_server() -> HTTPEngine:
    """An adapter over this process's vLLM OpenAI server on the tiny preset (8 sequences, a
    512-token context, prefix caching off), launched at the first call."""
    return vllm_adapter(vllm_server_process())


# The URL form: BATCHING_ENGINE_URL and what the server cannot say about itself.
URL = "BATCHING_ENGINE_URL"
_SETTINGS = {
    "BATCHING_ENGINE_VOCAB_SIZE": "vocab_size",
    "BATCHING_ENGINE_DIALECT": "dialect",
    "BATCHING_ENGINE_MODEL": "model",
    "BATCHING_ENGINE_MAX_MODEL_LEN": "max_model_len",
    "BATCHING_ENGINE_MAX_CONCURRENCY": "max_concurrency",
    "BATCHING_ENGINE_MAX_LOGPROBS": "max_logprobs",
    "BATCHING_ENGINE_STALL_TIMEOUT": "stall_timeout",
}
_NUMBERS = {"vocab_size": int, "max_model_len": int, "max_concurrency": int, "max_logprobs": int,
            "stall_timeout": float}


def from_env() -> HTTPEngine:
    """An adapter over the server at $BATCHING_ENGINE_URL (`--engine
    engines.adapters.http:from_env`). $BATCHING_ENGINE_VOCAB_SIZE is required (no server
    endpoint gives it); optional: _DIALECT (openai | llama), _MODEL, _MAX_MODEL_LEN (where the
    server does not say it), _MAX_CONCURRENCY, _MAX_LOGPROBS (vLLM: --max-logprobs, default 20),
    _STALL_TIMEOUT (seconds)."""
    url = os.environ.get(URL)
    if not url:
        raise ValueError(f"{URL} is not set: set it to the server's base URL, e.g. "
                         "http://127.0.0.1:8000")
    kw: dict[str, object] = {}
    for var, name in _SETTINGS.items():
        value = os.environ.get(var)
        if not value:
            continue
        try:
            kw[name] = _NUMBERS[name](value) if name in _NUMBERS else value
        except ValueError:
            raise ValueError(f"{var}: {value!r} is not a number") from None
    if "vocab_size" not in kw:
        raise ValueError("BATCHING_ENGINE_VOCAB_SIZE is not set: the model's vocabulary size "
                         "(config.json's vocab_size); no server endpoint says it")
    return HTTPEngine(url, **kw)  # type: ignore[arg-type]
