"""A preset (or checkpoint) as an onnxruntime-genai model directory, built offline once and
cached.

The preset is saved as a safetensors checkpoint (engines.adapters.common.checkpoints), then
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu` writes `model.onnx` and
`genai_config.json`. For Llama-family checkpoints the builder loads a tokenizer and resolves an
EOS id: a preset's checkpoint carries the 1:1 WordLevel tokenizer
(engines.adapters.common.tokenizer), and the builder reads a linked copy whose config names the
EOS below. The builder sets `eos_token_id` to 0 for a checkpoint without one (ours
have none), and the library then ends every request that generates token 0. It accepts no EOS
outside the vocabulary (it checks `0 <= eos < vocab_size` when a request starts) and an empty
list falls back to 0, so the config is rewritten to name `eos_id(vocab)`, the last token, and
the adapter turns a stop there that the request did not ask for into a continuation
(engines.adapters.ortgenai.adapter).

Cache key (engines.adapters.common.checkpoints): the checkpoint's weights and config and the
library version.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engines.adapters.common.checkpoints import (
    ConversionError,
    UnsupportedArchitecture,
    converted_dir,
)

__all__ = ["ConversionError", "UnsupportedArchitecture", "eos_id", "ortgenai_dir"]


def eos_id(vocab_size: int) -> int:
    """The EOS id written into genai_config.json: the last token of the vocabulary."""
    return vocab_size - 1


def _with_eos(checkpoint: Path, into: Path) -> Path:
    """The checkpoint as the builder needs it: for Llama-family models it resolves an EOS id
    from the config or the tokenizer and fails where neither has one (ours have none), so a
    copy whose config names eos_id(vocab), the id the config is rewritten to anyway; the
    other files are linked, not copied."""
    config = json.loads((checkpoint / "config.json").read_text())
    if config.get("eos_token_id") is not None:
        return checkpoint
    into.mkdir()
    for f in checkpoint.iterdir():
        if f.name != "config.json":
            (into / f.name).symlink_to(f.resolve())
    config["eos_token_id"] = eos_id(int(config["vocab_size"]))
    (into / "config.json").write_text(json.dumps(config, indent=2))
    return into


def _build(checkpoint: Path, out: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cache = out / ".builder-cache"
    checkpoint = _with_eos(checkpoint, out / ".checkpoint")
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
           "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(cache)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    config = out / "genai_config.json"
    if done.returncode != 0 and "model is not currently supported" in done.stderr + done.stdout:
        # The builder has no such architecture (Mixtral in 0.18.0): a refusal, not a failure.
        raise UnsupportedArchitecture(f"model: onnxruntime_genai.models.builder does not support "
                                      f"the architecture of {str(checkpoint)!r}")
    if done.returncode != 0 or not config.is_file() or not (out / "model.onnx").is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ConversionError(f"onnxruntime_genai.models.builder failed ({done.returncode}) "
                              f"on {str(checkpoint)!r}:\n{tail}")
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(out / ".checkpoint", ignore_errors=True)
    genai = json.loads(config.read_text())
    genai["model"]["eos_token_id"] = eos_id(int(genai["model"]["vocab_size"]))
    config.write_text(json.dumps(genai, indent=4))


@functools.lru_cache(maxsize=8)
def ortgenai_dir(model: str, seed: int) -> Path:
    """The built model of a preset name or a checkpoint directory, building it once."""
    import onnxruntime_genai

    # Through the module global, so that a test can replace _build.
    # The builder loads the architecture's tokenizer for Llama-family checkpoints: a preset's
    # checkpoint carries the 1:1 one.
    return converted_dir(model, seed, library="ortgenai", version=onnxruntime_genai.__version__,
                         marker="genai_config.json", convert=lambda c, out: _build(c, out),
                         tokenizer=True)
