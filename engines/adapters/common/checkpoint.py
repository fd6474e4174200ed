"""Presets as checkpoints on disk, and converted models cached beside them: what every adapter
whose library converts a checkpoint offline (OpenVINO, onnxruntime-genai) shares.

A preset is saved once per definition and seed; a converted directory is named by the
checkpoint's weights digest (and, by each caller, the converter's version), so a changed preset,
seed or converter never loads a stale conversion, and a second call converts nothing.
Imports no third-party engine library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engines.models import PRESETS, build_preset, save_checkpoint

__all__ = ["ConversionError", "cache_root", "checkpoint_dir", "publish", "weights_digest"]


class ConversionError(RuntimeError):
    """The offline conversion could not run or failed; the message says why."""


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "batching-engines"


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


def checkpoint_dir(preset: str, *, seed: int) -> Path:
    """The preset saved once as a checkpoint directory (keyed by its definition and seed)."""
    if preset not in PRESETS:
        raise ValueError(f"model: unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    digest = hashlib.sha256(repr(PRESETS[preset]).encode()).hexdigest()[:10]
    path = cache_root() / f"{preset}-seed{seed}-{digest}"
    if (path / "config.json").is_file():
        return path
    shutil.rmtree(path, ignore_errors=True)  # a leftover without its config is no checkpoint
    return publish(lambda tmp: save_checkpoint(build_preset(preset, seed=seed), tmp), path)


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
