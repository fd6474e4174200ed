"""A preset saved as a checkpoint and converted offline for a library, each once and cached.

Cache key of a converted directory: the checkpoint's name (preset and seed), the sha256 of its
weights and config, and the library's version, so a changed preset, seed or converter never
loads a stale conversion, and a second call (in this process or a later one) converts nothing.
Imports no third-party engine library: each adapter's convert module passes its own converter.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engines.adapters.common.tokenizer import TOKENIZER, write_tokenizer
from engines.models import (
    DEFAULT_SEED,
    PRESETS,
    build_preset,
    cache_root,
    parse_dtype,
    save_checkpoint,
)
from engines.tokenizer import TOKENIZER_VERSION, tokenizer_for

__all__ = ["ConversionError", "UnsupportedArchitecture", "cache_root", "checkpoint_dir",
           "converted_dir", "export_preset", "legacy_config", "preset_digest", "publish",
           "weights_digest"]

# In the directory names of checkpoints written with the legacy config fields: a change to
# what legacy_config writes gets a fresh directory.
LEGACY = "legacy1"


class ConversionError(RuntimeError):
    """The offline conversion could not run or failed; the message says why."""


class UnsupportedArchitecture(ConversionError, ValueError):
    """The library's converter refuses this architecture outright: the engine's declared
    "unsupported" (a ValueError, as our engines' refusals are), not a conversion that went
    wrong."""


def publish(build: Callable[[Path], object], path: Path) -> Path:
    """Run `build(tmp)` into a fresh folder beside `path`, then rename it into place: a
    half-written directory is never found, and parallel workers racing for it are harmless."""
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        build(tmp)
        tmp.rename(path)
    except OSError:
        if not path.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def checkpoint_dir(preset: str, *, seed: int, tokenizer: bool | str = False) -> Path:
    """The preset saved once as a checkpoint directory (keyed by its definition and seed).
    `tokenizer`: the tokenizer it carries, for the tools that will not load a checkpoint
    without one. True or "wordlevel": the 1:1 WordLevel `t{i}` one (engines.adapters.common
    .tokenizer), which the adapters that send or read token text as words depend on; "bpe":
    the presets' byte-level BPE (engines.tokenizer), for the adapters that send text
    features (stop strings, guided decoding) and must mean by them what our engines do."""
    if preset not in PRESETS:
        raise ValueError(f"model: unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    kind = "wordlevel" if tokenizer is True else tokenizer or None
    if kind not in (None, "wordlevel", "bpe"):
        raise ValueError(f"tokenizer: {tokenizer!r}; expected False, True, 'wordlevel' or 'bpe'")
    name = f"{preset}-seed{seed}-{preset_digest(preset)}"
    suffix = {None: "", "wordlevel": f"-{TOKENIZER}", "bpe": f"-{TOKENIZER_VERSION}"}[kind]
    path = cache_root() / f"{name}{suffix}"
    marker = "config.json" if kind is None else "tokenizer.json"
    if (path / marker).is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)  # a leftover without its marker is unfinished

    def build(tmp: Path) -> None:
        model = build_preset(preset, seed=seed)
        save_checkpoint(model, tmp)
        if kind == "wordlevel":
            write_tokenizer(tmp, int(model.config.vocab_size))
        elif kind == "bpe":
            source = Path(tokenizer_for(int(model.config.vocab_size)))
            for file in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copyfile(source / file, tmp / file)

    return publish(build, path)


def export_preset(preset: str, *, seed: int = DEFAULT_SEED, dtype: str = "float32",
                  tokenizer: bool | str = False, legacy_config_fields: bool = False) -> Path:
    """A preset saved as a transformers checkpoint directory (config.json, model.safetensors,
    generation_config.json), once, cached under cache_root() and keyed by the preset's
    definition, the seed and these options; the same arguments give the same bits anywhere.

    - `seed`: the seeded random weights' seed (engines.models.build_preset; the suite's
      default 0).
    - `dtype`: the weights' dtype ("float32", the presets' own, or "float16"/"bfloat16", cast
      from it).
    - `tokenizer`: False (none), True or "wordlevel" (token i is the word `t{i}`, split on
      whitespace: no decoder, no special tokens) or "bpe" (checkpoint_dir says which
      adapters need which). Prompts and outputs are token ids either way.
    - `legacy_config_fields`: also write the config fields of transformers before 5
      (legacy_config): `rope_theta` and `rope_scaling` beside transformers 5's
      `rope_parameters`, which older loaders need (mistral.rs 0.9.5: "missing field
      `rope_theta`").
    The config's `max_position_embeddings` (1024 for most presets) is not the context an
    engine serves: that is `engines.models.preset_max_model_len(preset)` (512 for most).
    """
    base = checkpoint_dir(preset, seed=seed, tokenizer=tokenizer)
    torch_dtype = parse_dtype(dtype)
    suffix = "" if str(torch_dtype) == "torch.float32" else \
        f"-{str(torch_dtype).removeprefix('torch.')}"
    if legacy_config_fields:
        suffix += f"-{LEGACY}"
    if not suffix:
        return base
    path = cache_root() / f"{base.name}{suffix}"
    if (path / "config.json").is_file():
        return path

    def build(tmp: Path) -> None:
        if suffix.startswith("-") and str(torch_dtype) != "torch.float32":
            model = build_preset(preset, seed=seed).to(torch_dtype)  # type: ignore[arg-type]
            save_checkpoint(model, tmp)
        else:
            for f in base.glob("*.safetensors"):
                shutil.copyfile(f, tmp / f.name)
            for name in ("config.json", "generation_config.json"):
                if (base / name).is_file():
                    shutil.copyfile(base / name, tmp / name)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if (base / name).is_file():
                shutil.copyfile(base / name, tmp / name)
        if legacy_config_fields:
            config_file = tmp / "config.json"
            config = legacy_config(json.loads(config_file.read_text()))
            config_file.write_text(json.dumps(config, indent=2) + "\n")

    return publish(build, path)


def legacy_config(config: dict[str, Any]) -> dict[str, Any]:
    """A transformers-5 config.json's fields plus those of the older format, for loaders that
    predate `rope_parameters`: `rope_theta` at the top level, and (for a scaled RoPE) its
    parameters as `rope_scaling`, the type under both `type` and `rope_type`; long-RoPE's
    `original_max_position_embeddings` also at the top level (Phi-3's older loaders read it
    there). Fields already present are kept; a config without `rope_parameters` is returned
    as it is."""
    out = dict(config)
    params = config.get("rope_parameters")
    if not isinstance(params, dict):
        return out
    if "rope_theta" in params:
        out.setdefault("rope_theta", params["rope_theta"])
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        out.setdefault("rope_scaling", None)
    else:
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        scaling.update(type=kind, rope_type=kind)
        out.setdefault("rope_scaling", scaling)
        if "original_max_position_embeddings" in params:
            out.setdefault("original_max_position_embeddings",
                           params["original_max_position_embeddings"])
    return out


def preset_digest(preset: str) -> str:
    """A short hash of the preset's definition: an edited preset never loads stale weights."""
    return hashlib.sha256(repr(PRESETS[preset]).encode()).hexdigest()[:10]


def weights_digest(checkpoint: Path) -> str:
    """sha256 over the checkpoint's config and weight files, in name order."""
    h = hashlib.sha256()
    files = sorted(checkpoint.glob("*.safetensors")) + [checkpoint / "config.json"]
    if not files[0].name.endswith(".safetensors"):
        raise ConversionError(f"model: {str(checkpoint)!r} has no safetensors weights")
    for f in files:
        h.update(f.name.encode())
        with f.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def converted_dir(model: str, seed: int, *, library: str, version: str, marker: str,
                  convert: Callable[[Path, Path], None], tokenizer: bool | str = False) -> Path:
    """`convert(checkpoint, out)`'s directory for a preset name or a checkpoint directory,
    under cache_root()/library, converting once; `marker` is the file a finished conversion
    has (a directory without it is converted again). `tokenizer`: the tokenizer a preset's
    checkpoint carries (checkpoint_dir: True for the 1:1 one, "bpe" for the presets' BPE),
    for converters that instantiate one; the checkpoint's name, and so the cache key, says so."""
    checkpoint = (checkpoint_dir(model, seed=seed, tokenizer=tokenizer) if model in PRESETS
                  else Path(model))
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"model: {model!r} is neither a preset nor a checkpoint directory")
    path = cache_root() / library / f"{checkpoint.name}-{weights_digest(checkpoint)}-{version}"
    if (path / marker).is_file():
        return path
    return publish(lambda tmp: convert(checkpoint, tmp), path)
