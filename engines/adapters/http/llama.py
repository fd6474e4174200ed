"""llama.cpp's llama-server on a preset, launched for the tests: the binary, the GGUF model,
the process, and the factories (re-exported by engines.adapters.http).

The binary is the one $BATCHING_LLAMA_SERVER names (ci/llama-server-env.sh builds it from the
llama.cpp that llama-cpp-python's source distribution vendors, and keeps that source tree
beside it as ../src). The preset is converted to GGUF F32 by that tree's own
convert_hf_to_gguf.py (engines.adapters.http.gguf_convert), once per preset, seed and
llama.cpp build, in the conversions' cache. As with vLLM's server, one server per process and
configuration: every factory call returns a new adapter over it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from engines.adapters.http.adapter import HTTPEngine
from engines.adapters.http.launch import PORT, Server, launch

__all__ = ["LLAMA_CPP_SRC", "LLAMA_SERVER", "binary_digest", "gguf_model", "llama_server",
           "llama_server_binary", "llama_server_cache_prompt", "llama_server_one_slot",
           "llama_server_process"]

LLAMA_SERVER = "BATCHING_LLAMA_SERVER"  # the llama-server binary
LLAMA_CPP_SRC = "BATCHING_LLAMA_CPP_SRC"  # its source tree; default: <binary>/../../src
START_TIMEOUT = "BATCHING_SERVER_START_TIMEOUT"

_servers: dict[tuple[object, ...], Server] = {}


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


def llama_cpp_source(binary: Path) -> Path:
    """The llama.cpp source tree the binary was built from (for its GGUF converter)."""
    path = Path(os.environ.get(LLAMA_CPP_SRC) or binary.resolve().parent.parent / "src")
    if not (path / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(
            f"{LLAMA_CPP_SRC}: no convert_hf_to_gguf.py in {str(path)!r}; set it to the llama.cpp "
            "source tree llama-server was built from (ci/llama-server-env.sh keeps it beside "
            "the binary as ../src)")
    return path


def binary_digest(binary: Path) -> str:
    """A short sha256 of the binary: the conversions' cache key for the llama.cpp build (an
    sdist's llama.cpp has no git metadata: its `--version` says build 0, commit unknown)."""
    h = hashlib.sha256()
    with binary.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:12]


def gguf_model(preset: str = "tiny", *, seed: int = 0, binary: Path | None = None) -> Path:
    """The preset's seeded weights as GGUF F32, converted once per llama.cpp build."""
    from engines.adapters.common.checkpoints import (
        ConversionError,
        cache_root,
        checkpoint_dir,
        preset_digest,
        publish,
    )

    binary = binary or llama_server_binary()
    src = llama_cpp_source(binary)
    path = (cache_root() / "llama.cpp" /
            f"{preset}-seed{seed}-{preset_digest(preset)}-llama{binary_digest(binary)}")
    model = path / "model.gguf"
    if model.is_file():
        return model
    ckpt = checkpoint_dir(preset, seed=seed)

    def convert(tmp: Path) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "engines.adapters.http.gguf_convert", str(src), str(ckpt),
             str(tmp / "model.gguf")], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise ConversionError(f"convert_hf_to_gguf ({src}) failed on {ckpt}:\n"
                                  f"{(out.stdout + out.stderr)[-2000:]}")

    publish(convert, path)
    return model


def llama_server_process(preset: str = "tiny", *, seed: int = 0, slots: int = 4,
                         extra: tuple[str, ...] = ()) -> Server:
    """This process's llama-server over the preset with `slots` parallel slots, each with the
    preset's context (launched at the first call)."""
    from engines.models import preset_max_model_len

    ctx = preset_max_model_len(preset) or 512
    key = (preset, seed, slots, extra)
    server = _servers.get(key)
    if server is not None and server.alive:
        return server
    binary = llama_server_binary()
    model = gguf_model(preset, seed=seed, binary=binary)
    argv = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", PORT,
        # -c is the whole KV cache; each slot gets ctx tokens of it.
        "-c", str(ctx * slots), "--parallel", str(slots), "--no-kv-unified",
        # Attention in F32, as the weights: an F32 KV cache (the default is F16) and no flash
        # attention, which casts K and V to F16 even from an F32 cache (llama-graph.cpp;
        # upstream's choice, llama.cpp PR 12825). Either alone put logprobs 4e-3 to 2e-2 off
        # the F32 reference and flipped greedy near-ties; without both, within 1e-5.
        "--cache-type-k", "f32", "--cache-type-v", "f32", "--flash-attn", "off",
        # One thread: the machine's other core belongs to the benchmarks (and the reference).
        "-t", "1", "-tb", "1", "--seed", str(seed), "--no-webui",
        # /metrics and /slots: what the server says it runs (the drain check reads them).
        "--metrics", "--slots", *extra,
    ]
    timeout = float(os.environ.get(START_TIMEOUT) or 300)
    server = launch(argv, timeout=timeout, name=f"llama-server-{preset}")
    _servers[key] = server
    return server


def _engine(server: Server, *, dialect: str = "llama") -> HTTPEngine:
    import json

    from engines.adapters.common.checkpoints import checkpoint_dir

    config = json.loads((checkpoint_dir("tiny", seed=0) / "config.json").read_text())
    # max_model_len and max_concurrency come from the server's /props.
    return HTTPEngine(server.url, vocab_size=int(config["vocab_size"]), dialect=dialect,
                      log=str(server.log))


def llama_server() -> HTTPEngine:
    """llama-server on the tiny preset: 4 slots of 512 tokens, cache_prompt off (nothing
    carries over between requests), launched at the first call."""
    return _engine(llama_server_process())


def llama_server_one_slot() -> HTTPEngine:
    """As llama_server with one slot (--parallel 1): requests queue and run one at a time."""
    return _engine(llama_server_process(slots=1))


def llama_server_cache_prompt() -> HTTPEngine:
    """As llama_server with cache_prompt on: a slot reuses the KV of the longest common
    prefix of its last request's prompt."""
    return _engine(llama_server_process(), dialect="llama-cache-prompt")
