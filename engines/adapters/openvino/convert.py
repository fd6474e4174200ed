"""A preset (or checkpoint) as an OpenVINO IR directory, converted offline once and cached.

The preset is saved as a safetensors checkpoint, then `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` turns it into the stateful IR that
`ContinuousBatchingPipeline` loads (it rewrites its attention into paged attention itself).
optimum-intel 2.2.0 needs transformers < 5.6 and this package needs >= 5.16, so the converter
runs in a subprocess with its own layer first on PYTHONPATH: `ci/openvino-env.sh` installs it
into `<venv>/optimum-export` (`BATCHING_OPENVINO_EXPORT` names another folder).

The checkpoint carries the presets' byte-level BPE (engines.tokenizer), which optimum converts
into openvino_tokenizer.xml / openvino_detokenizer.xml: the library's stop strings and
structured output read text through them.

Cache key (engines.adapters.common.checkpoints): the checkpoint's weights and config (its
name says which tokenizer it carries) and the openvino version.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from engines.adapters.common.checkpoints import (
    ConversionError,
    UnsupportedArchitecture,
    cache_root,
    checkpoint_dir,
    converted_dir,
    weights_digest,
)

__all__ = ["ConversionError", "UnsupportedArchitecture", "cache_root", "checkpoint_dir",
           "export_layer", "openvino_dir", "tokenizer_dir", "weights_digest"]

EXPORT_ENV = "BATCHING_OPENVINO_EXPORT"
# optimum-intel's per-architecture ceiling on transformers (Gemma-2's is 5.0 in 2.2.0).
_VERSION_REFUSAL = re.compile(r"does not allow for the export of the model\. Maximum required "
                              r"is (?P<max>[\w.]+), got: (?P<got>[\w.]+)")


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
    refused = _VERSION_REFUSAL.search(done.stdout + done.stderr)
    if done.returncode != 0 and refused:
        raise UnsupportedArchitecture(
            f"model: optimum-intel's OpenVINO export refuses the architecture of "
            f"{str(checkpoint)!r} under the transformers {refused['got']} of its export layer "
            f"(it exports that architecture with transformers <= {refused['max']} only; "
            f"optimum-intel 2.2.0 does so for every Gemma): the adapter cannot serve it")
    if done.returncode != 0 or not (out / "openvino_model.xml").is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ConversionError(f"optimum-cli export openvino failed ({done.returncode}) on "
                              f"{str(checkpoint)!r}:\n{tail}")


@functools.lru_cache(maxsize=8)
def openvino_dir(model: str, seed: int) -> Path:
    """The converted IR of a preset name or a checkpoint directory, converting it once."""
    import openvino

    version = openvino.get_version().split("-")[0]
    # Through the module global, so that a test can replace _convert.
    # The presets' BPE goes with the weights: optimum converts it into the IR's tokenizer and
    # detokenizer, which the library's stop strings and structured output read.
    return converted_dir(model, seed, library="openvino", version=version,
                         marker="openvino_model.xml", convert=lambda c, out: _convert(c, out),
                         tokenizer="bpe")


def tokenizer_dir(converted: Path) -> Path:
    """The directory holding the tokenizer.json a converted model's IR tokenizer was made from:
    the checkpoint's own where it is cached beside the conversion (a preset's, the presets'
    BPE), else the copy optimum wrote into the conversion (re-saved by its transformers)."""
    name = converted.name.rsplit("-", 2)[0]  # <checkpoint>-<weights digest>-<version>
    source = cache_root() / name
    return source if (source / "tokenizer.json").is_file() else converted
