"""A preset (or checkpoint) as an onnxruntime-genai model directory, built offline once and
cached.

The preset is saved as a safetensors checkpoint (engines.adapters.common.checkpoints), then
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu` writes `model.onnx` and
`genai_config.json`. A model with both sliding-window and full layers (Gemma-2's `layer_types`)
is built with `--extra_options windowed_kv_cache=false` (builder_options): the builder's
default there, a window-sized KV cache on the sliding layers, fails in the library's own
Engine on every batch whose prompts differ in length, and in its Generator on any request
whose `max_length` is below window + 16 (docs/findings.md, report 23); with a full-length
cache on every layer the window is still applied (the attention's `local_window_size`), and
the tokens equal transformers'.

For Llama-family checkpoints the builder loads a tokenizer and resolves an EOS id: a preset's
checkpoint carries the 1:1 WordLevel tokenizer (engines.adapters.common.tokenizer), and the
builder reads a linked copy whose config names the EOS below. The builder sets `eos_token_id`
to 0 for a checkpoint without one (ours have none), and the library then ends every request
that generates token 0. It accepts no EOS
outside the vocabulary (it checks `0 <= eos < vocab_size` when a request starts) and an empty
list falls back to 0, so the config is rewritten to name `eos_id(vocab)`, the last token, and
the adapter turns a stop there that the request did not ask for into a continuation
(engines.adapters.ortgenai.adapter).

Cache key (engines.adapters.common.checkpoints): the checkpoint's weights and config, the
library version and the builder options, if any.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from engines.adapters.common.checkpoints import (
    ConversionError,
    UnsupportedArchitecture,
    checkpoint_dir,
    converted_dir,
)
from engines.models import PRESETS

__all__ = ["FULL_KV", "ConversionError", "UnsupportedArchitecture", "builder_options",
           "built_dir", "eos_id", "ortgenai_dir", "with_tokenizer"]

# The builder's option that gives every layer a full-length KV cache (report 23).
FULL_KV = {"windowed_kv_cache": "false"}


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


def builder_options(checkpoint: Path) -> dict[str, str]:
    """The builder's `--extra_options` for a checkpoint: FULL_KV where the builder would give
    some layers a window-sized KV cache, which 0.18.0's runtime cannot batch (report 23).

    The builder marks a layer sliding where the config, as transformers loads it (the builder
    loads it so too, with the defaults its class fills in), says `layer_types[i] ==
    "sliding_attention"` and `sliding_window` is set. A config without `layer_types` (Mistral)
    gets no sliding layer from the builder at all (report 19), and no option here."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(checkpoint))
    return dict(FULL_KV) if _has_sliding_layers(config.to_dict()) else {}


def _has_sliding_layers(config: Mapping[str, object]) -> bool:
    window = config.get("sliding_window")
    layer_types = config.get("layer_types") or ()
    return (isinstance(window, int) and window > 0 and isinstance(layer_types, (list, tuple))
            and "sliding_attention" in layer_types)


def _build(checkpoint: Path, out: Path, options: Mapping[str, str],
           precision: str = "fp32") -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cache = out / ".builder-cache"
    checkpoint = _with_eos(checkpoint, out / ".checkpoint")
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint),
           "-o", str(out), "-p", precision, "-e", "cpu", "-c", str(cache)]
    if options:
        cmd += ["--extra_options", *(f"{k}={v}" for k, v in sorted(options.items()))]
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
def ortgenai_dir(model: str, seed: int, precision: str = "fp32") -> Path:
    """The built model of a preset name or a checkpoint directory, building it once, with the
    builder options the checkpoint needs here (builder_options), at the builder's
    `precision` (its -p: fp32, fp16, int4)."""
    # The builder loads the architecture's tokenizer for Llama-family checkpoints: a preset's
    # checkpoint carries the 1:1 one.
    checkpoint = (checkpoint_dir(model, seed=seed, tokenizer=True) if model in PRESETS
                  else Path(model))
    options = builder_options(checkpoint) if (checkpoint / "config.json").is_file() else {}
    return built_dir(model, seed, options, precision)


def built_dir(model: str, seed: int, options: Mapping[str, str], precision: str = "fp32") -> Path:
    """The model built with these builder options (none: the builder's defaults) at this
    precision, once; both are in the cache key (fp32's directories keep their old names)."""
    import onnxruntime_genai

    tag = "".join(f"-{k}={v}" for k, v in sorted(options.items()))
    tag += "" if precision == "fp32" else f"-p={precision}"
    # Through the module global, so that a test can replace _build.
    return converted_dir(model, seed, library="ortgenai",
                         version=f"{onnxruntime_genai.__version__}{tag}",
                         marker="genai_config.json",
                         convert=lambda c, out: _build(c, out, options, precision),
                         tokenizer=True)


def with_tokenizer(built: Path, tokenizer_dir: str | Path) -> Path:
    """The built model beside another tokenizer (the presets' byte-level BPE, engines.tokenizer):
    a directory of links to the built files but the tokenizer's, and a copy of the tokenizer's.
    The library reads the model directory's tokenizer.json for guidance and for its own
    detokenizer; the builder needed the 1:1 one (above), whose "words" are no text. Made once,
    next to the built model, named after both."""
    source = Path(tokenizer_dir)
    out = built.parent / f"{built.name}+{source.name}"
    if (out / "tokenizer.json").is_file():
        return out
    tmp = built.parent / f".{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in built.iterdir():
        if not f.name.startswith("tokenizer") and not f.name.startswith("."):
            (tmp / f.name).symlink_to(f.resolve())
    for f in source.iterdir():
        if f.name.startswith("tokenizer"):
            shutil.copy(f, tmp / f.name)
    try:
        tmp.rename(out)
    except OSError:  # a parallel worker published it first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "tokenizer.json").is_file():
            raise
    return out
