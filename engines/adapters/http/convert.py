"""The preset in the formats the servers load, written once into the conversions' cache:
for vLLM's server a checkpoint directory with a tokenizer, for llama-server a GGUF file (F32;
F16 or Q8_0 for the deployment-precision variants).

Servers take a directory or a file, not a model object. The tokenizer is a WordLevel
vocabulary `t0 .. t{V-1}`: prompts and outputs stay token ids, but vLLM's server returns
logprobs only where a tokenizer is served (it refuses them with --skip-tokenizer-init).

The GGUF file is made by convert_hf_to_gguf.py of the llama.cpp source tree llama-server was
built from (ci/llama-server-env.sh keeps it beside the binary as ../src), run as a child
process (engines.adapters.http.gguf_convert), once per preset, seed, outtype and llama.cpp
build.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from engines.adapters.common.tokenizer import TOKENIZER, write_tokenizer

__all__ = ["LLAMA_CPP_SRC", "TOKENIZER", "binary_digest", "gguf_model", "llama_cpp_source",
           "server_checkpoint", "write_tokenizer"]

LLAMA_CPP_SRC = "BATCHING_LLAMA_CPP_SRC"  # llama.cpp's source tree; default <binary>/../../src


def server_checkpoint(preset: str = "tiny", *, seed: int = 0) -> Path:
    """The preset's seeded weights and a tokenizer, written once into a cache directory."""
    # Here, not at module level: torch and transformers take seconds to import, and the
    # adapter and the URL form never need them.
    from engines.adapters.common.checkpoints import checkpoint_dir

    return checkpoint_dir(preset, seed=seed, tokenizer=True)


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


def gguf_model(preset: str = "tiny", *, seed: int = 0, binary: Path, bpe: bool = False,
               outtype: str = "f32") -> Path:
    """The preset's seeded weights as GGUF for this llama-server binary's llama.cpp, converted
    once per build and outtype (the converter's --outtype: gguf_convert.OUTTYPES; f32, the
    default, is exact). `bpe`: with the presets' byte-level BPE as its vocabulary and
    `<|endoftext|>` its EOS (engines.adapters.http.gguf_convert), not the "test" one."""
    from engines.adapters.common.checkpoints import (
        ConversionError,
        cache_root,
        checkpoint_dir,
        preset_digest,
        publish,
    )
    from engines.adapters.http.gguf_convert import OUTTYPES
    from engines.tokenizer import TOKENIZER_VERSION, tokenizer_for

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype: {outtype!r}; expected one of {', '.join(OUTTYPES)}")
    src = llama_cpp_source(binary)
    vocab = f"-{TOKENIZER_VERSION}" if bpe else ""
    fmt = "" if outtype == "f32" else f"-{outtype}"  # F32's cache paths as they were
    path = (cache_root() / "llama.cpp" / f"{preset}-seed{seed}-{preset_digest(preset)}{vocab}"
            f"{fmt}-llama{binary_digest(binary)}")
    model = path / "model.gguf"
    if model.is_file():
        return model
    ckpt = checkpoint_dir(preset, seed=seed)

    def convert(tmp: Path) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "engines.adapters.http.gguf_convert", str(src), str(ckpt),
             str(tmp / "model.gguf"), *([str(tokenizer_for(preset))] if bpe else []),
             "--outtype", outtype],
            capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise ConversionError(f"convert_hf_to_gguf ({src}) failed on {ckpt}:\n"
                                  f"{(out.stdout + out.stderr)[-2000:]}")

    publish(convert, path)
    return model
