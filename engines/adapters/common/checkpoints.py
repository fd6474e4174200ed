"""A preset saved as a checkpoint and converted offline for a library, each once and cached.

Cache key of a converted directory: the checkpoint's name (preset and seed), the sha256 of its
weights and config, and the library's version, so a changed preset, seed or converter never
loads a stale conversion, and a second call (in this process or a later one) converts nothing.
Imports no third-party engine library: each adapter's convert module passes its own converter.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engines.adapters.common.tokenizer import TOKENIZER, write_tokenizer
from engines.models import PRESETS, build_preset, cache_root, save_checkpoint
from engines.tokenizer import TOKENIZER_VERSION, tokenizer_for

__all__ = ["ConversionError", "UnsupportedArchitecture", "cache_root", "checkpoint_dir",
           "converted_dir", "preset_digest", "publish", "weights_digest"]


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
                  convert: Callable[[Path, Path], None], tokenizer: bool = False) -> Path:
    """`convert(checkpoint, out)`'s directory for a preset name or a checkpoint directory,
    under cache_root()/library, converting once; `marker` is the file a finished conversion
    has (a directory without it is converted again). `tokenizer`: a preset's checkpoint
    carries the 1:1 tokenizer (checkpoint_dir), for converters that instantiate one; the
    checkpoint's name, and so the cache key, says so."""
    checkpoint = (checkpoint_dir(model, seed=seed, tokenizer=tokenizer) if model in PRESETS
                  else Path(model))
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"model: {model!r} is neither a preset nor a checkpoint directory")
    path = cache_root() / library / f"{checkpoint.name}-{weights_digest(checkpoint)}-{version}"
    if (path / marker).is_file():
        return path
    return publish(lambda tmp: convert(checkpoint, tmp), path)
