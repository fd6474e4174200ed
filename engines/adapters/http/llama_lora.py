"""The zoo's PEFT LoRA adapters as GGUF LoRA files for llama-server (`--lora FILE`), made by
convert_lora_to_gguf.py of the llama.cpp source tree the binary was built from, once per
adapter and build, in the conversions' cache.

The adapter's scaling (alpha / rank) travels in the file (`adapter.lora.alpha`), and
llama.cpp applies alpha / rank x the request's scale, as PEFT applies alpha / rank: a request
naming the adapter at scale 1 is the PEFT reference's adapter.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engines.adapters.http.convert import binary_digest, llama_cpp_source

__all__ = ["gguf_lora", "gguf_loras"]


def gguf_lora(adapter: Path, *, preset: str, seed: int, binary: Path) -> Path:
    """The PEFT adapter directory as a GGUF F32 LoRA file for this llama-server build."""
    from engines.adapters.common.checkpoints import (
        ConversionError,
        cache_root,
        checkpoint_dir,
        publish,
    )

    src = llama_cpp_source(binary)
    path = cache_root() / "llama.cpp" / f"lora-{adapter.name}-llama{binary_digest(binary)}"
    out = path / "adapter.gguf"
    if out.is_file():
        return out
    base = checkpoint_dir(preset, seed=seed)  # only its config is read

    def convert(tmp: Path) -> None:
        done = subprocess.run(
            [sys.executable, str(src / "convert_lora_to_gguf.py"), "--base", str(base),
             "--outtype", "f32", "--outfile", str(tmp / "adapter.gguf"), str(adapter)],
            capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (tmp / "adapter.gguf").is_file():
            raise ConversionError(f"convert_lora_to_gguf ({src}) failed on {adapter}:\n"
                                  f"{(done.stdout + done.stderr)[-2000:]}")

    publish(convert, path)
    return out


def gguf_loras(preset: str, n: int, *, seed: int, binary: Path) -> dict[str, tuple[str, Path]]:
    """The preset's first `n` zoo adapters: name -> (its PEFT directory, its GGUF file), in
    the zoo's order (the order of `--lora` flags, so adapter i has id i on the server)."""
    from engines.loras import zoo_loras

    peft = zoo_loras(preset, n, seed=seed)
    return {name: (str(path), gguf_lora(Path(path), preset=preset, seed=seed, binary=binary))
            for name, path in peft.items()}
