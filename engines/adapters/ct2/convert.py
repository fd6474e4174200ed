"""A preset (or checkpoint) as a CTranslate2 model directory, converted offline once and cached.

The preset is saved as a safetensors checkpoint, then ctranslate2's own converter
(`TransformersConverter`, what `ct2-transformers-converter` runs) writes `model.bin`,
`config.json` and `vocabulary.json` in float32. For Llama-family checkpoints it loads the
architecture's tokenizer (a sentencepiece one by default), so a preset's checkpoint carries the
1:1 WordLevel tokenizer (engines.adapters.common.tokenizer, `t0`, `t1`, ...). The vocabulary
it writes is one string per token id (the tokenizer's words, or invented ones such as
`<extra_id_0>` where a loader reads none), and the adapter maps ids through it. Cache key
(engines.adapters.common.checkpoints): the checkpoint's name, weights and config and the
ctranslate2 version.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from engines.adapters.common.checkpoints import (
    ConversionError,
    UnsupportedArchitecture,
    converted_dir,
)

__all__ = ["ConversionError", "UnsupportedArchitecture", "ct2_dir", "vocabulary"]


def _convert(checkpoint: Path, out: Path) -> None:
    from ctranslate2.converters import TransformersConverter

    try:
        TransformersConverter(str(checkpoint)).convert(str(out), quantization="float32",
                                                       force=True)
    except ValueError as exc:
        if "No conversion is registered" not in str(exc):
            raise ConversionError(f"ctranslate2's TransformersConverter failed on "
                                  f"{str(checkpoint)!r}: {exc}") from exc
        # No loader for the architecture (Mixtral in 4.8.5): a refusal, not a failure.
        raise UnsupportedArchitecture(f"model: ctranslate2's converter has no loader for the "
                                      f"architecture of {str(checkpoint)!r}: {exc}") from exc
    except Exception as exc:  # the converter raises whatever its loaders raise
        raise ConversionError(f"ctranslate2's TransformersConverter failed on "
                              f"{str(checkpoint)!r}: {exc}") from exc
    # The converter copies the tokenizer's special tokens, which ours leaves unset, and the
    # runtime refuses a null one when it loads the model ("type must be string, but is
    # null"). The first word is what the converter invents where it has no tokenizer; no
    # request stops on it (the adapter passes end_token=[]).
    config_file = out / "config.json"
    config = json.loads(config_file.read_text())
    unset = [k for k in ("bos_token", "eos_token", "unk_token")
             if k in config and config[k] is None]
    if unset:
        first = vocabulary(out)[0]
        config.update(dict.fromkeys(unset, first))
        config_file.write_text(json.dumps(config, indent=2))


@functools.lru_cache(maxsize=8)
def ct2_dir(model: str, seed: int) -> Path:
    """The converted model of a preset name or a checkpoint directory, converting it once."""
    import ctranslate2

    # Through the module global, so that a test can replace _convert.
    # The converter loads the architecture's tokenizer for Llama-family checkpoints: a preset's
    # checkpoint carries the 1:1 one.
    return converted_dir(model, seed, library="ctranslate2", version=ctranslate2.__version__,
                         marker="model.bin", convert=lambda c, out: _convert(c, out),
                         tokenizer=True)


def vocabulary(model_dir: Path) -> list[str]:
    """The converted model's token strings, indexed by token id."""
    words = json.loads((model_dir / "vocabulary.json").read_text())
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ConversionError(f"{str(model_dir)!r}: vocabulary.json is not a list of strings")
    return words
