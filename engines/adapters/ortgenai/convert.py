"""A preset (or checkpoint) as an onnxruntime-genai model directory, built offline once and
cached.

The preset is saved as a safetensors checkpoint (engines.adapters.common.checkpoints), then
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu` writes `model.onnx` and
`genai_config.json`. The builder sets `eos_token_id` to 0 for a checkpoint without one (ours
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

from engines.adapters.common.checkpoints import ConversionError, converted_dir

__all__ = ["ConversionError", "eos_id", "ortgenai_dir"]


def eos_id(vocab_size: int) -> int:
    """The EOS id written into genai_config.json: the last token of the vocabulary."""
    return vocab_size - 1


def _build(checkpoint: Path, out: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cache = out / ".builder-cache"
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
           "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(cache)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    config = out / "genai_config.json"
    if done.returncode != 0 or not config.is_file() or not (out / "model.onnx").is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ConversionError(f"onnxruntime_genai.models.builder failed ({done.returncode}) "
                              f"on {str(checkpoint)!r}:\n{tail}")
    shutil.rmtree(cache, ignore_errors=True)
    genai = json.loads(config.read_text())
    genai["model"]["eos_token_id"] = eos_id(int(genai["model"]["vocab_size"]))
    config.write_text(json.dumps(genai, indent=4))


@functools.lru_cache(maxsize=8)
def ortgenai_dir(model: str, seed: int) -> Path:
    """The built model of a preset name or a checkpoint directory, building it once."""
    import onnxruntime_genai

    # Through the module global, so that a test can replace _build.
    return converted_dir(model, seed, library="ortgenai", version=onnxruntime_genai.__version__,
                         marker="genai_config.json", convert=lambda c, out: _build(c, out))
