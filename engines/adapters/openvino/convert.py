"""A preset (or checkpoint) as an OpenVINO IR directory, converted offline once and cached.

The preset is saved as a safetensors checkpoint, then `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` turns it into the stateful IR that
`ContinuousBatchingPipeline` loads (it rewrites its attention into paged attention itself).
optimum-intel 2.2.0 needs transformers < 5.6 and this package needs >= 5.16, so the converter
runs in a subprocess with its own layer first on PYTHONPATH: `ci/openvino-env.sh` installs it
into `<venv>/optimum-export` (`BATCHING_OPENVINO_EXPORT` names another folder).

Cache key: the converted directory is named by the sha256 of the checkpoint's weights and
config and by the openvino version, so a changed preset, seed or converter never loads a stale
IR, and a second call (in this process or a later one) converts nothing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from engines.models import PRESETS, build_preset, save_checkpoint

__all__ = ["ConversionError", "cache_root", "checkpoint_dir", "export_layer", "openvino_dir"]

EXPORT_ENV = "BATCHING_OPENVINO_EXPORT"


class ConversionError(RuntimeError):
    """The offline conversion could not run or failed; the message says why."""


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "batching-engines"


def _publish(build: object, path: Path) -> Path:
    """Run `build(tmp)` into a fresh folder beside `path`, then rename it into place: a
    half-written directory is never found, and parallel workers racing for it are harmless."""
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        build(tmp)  # type: ignore[operator]
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
    return _publish(lambda tmp: save_checkpoint(build_preset(preset, seed=seed), tmp), path)


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


def export_layer() -> Path:
    """The folder holding optimum-intel and its transformers (see the module docstring)."""
    named = os.environ.get(EXPORT_ENV)
    layer = Path(named) if named else Path(sys.prefix) / "optimum-export"
    if not (layer / "optimum" / "intel").is_dir():
        raise ConversionError(
            f"{EXPORT_ENV}: no optimum-intel in {str(layer)!r}; build the venv with "
            "`bash ci/openvino-env.sh` (it installs the converter there) or point "
            f"{EXPORT_ENV} at a folder with optimum-intel 2.2.0 and transformers 5.5.4")
    return layer


def _convert(checkpoint: Path, out: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(export_layer()), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino",
           "--model", str(checkpoint), "--task", "text-generation-with-past",
           "--weight-format", "fp32", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "openvino_model.xml").is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ConversionError(f"optimum-cli export openvino failed ({done.returncode}) on "
                              f"{str(checkpoint)!r}:\n{tail}")


@functools.lru_cache(maxsize=8)
def openvino_dir(model: str, seed: int) -> Path:
    """The converted IR of a preset name or a checkpoint directory, converting it once."""
    import openvino

    checkpoint = checkpoint_dir(model, seed=seed) if model in PRESETS else Path(model)
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"model: {model!r} is neither a preset nor a checkpoint directory")
    version = openvino.get_version().split("-")[0]
    path = cache_root() / "openvino" / f"{checkpoint.name}-{weights_digest(checkpoint)}-{version}"
    if (path / "openvino_model.xml").is_file():
        return path
    return _publish(lambda tmp: _convert(checkpoint, tmp), path)
