"""The model files the repro scripts read under --model-dir: each preset a script names, as a
plain transformers checkpoint with the presets' byte-level BPE tokenizer, in DIR/<preset>/.

Made by this project (the presets are seeded random weights, engines.models), once, and then
read by the scripts in the library's venv alone: that is what lets a maintainer run a script
with nothing of this project but the folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from engines.findings.ledger import Entry

SOURCE = ".exported-from"  # names the cached export a folder was copied from


def default_model_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "batching-engines" / "findings-models"


def presets_of(entries: Iterable[Entry]) -> list[str]:
    """The presets the scripts read (the union of their LEDGERs' `presets`), sorted."""
    return sorted({preset for entry in entries for preset in entry.presets})


def export(preset: str, folder: Path) -> Path:
    """`preset` as folder/<preset>/ (copied from engines' cached export; a copy made from
    another export, i.e. from an older definition of the preset, is replaced)."""
    # Imported here: it loads torch and transformers, which `list` and the tests of the
    # table need not pay for.
    from engines.adapters.common.checkpoints import export_preset

    source = export_preset(preset, tokenizer="bpe")
    target = folder / preset
    if (target / SOURCE).is_file() and (target / SOURCE).read_text().strip() == source.name:
        return target
    staging = folder / f".{preset}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    (staging / SOURCE).write_text(source.name + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)  # a script never sees a half-copied folder under the preset's name
    return target


def export_all(presets: Iterable[str], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [export(preset, folder) for preset in presets]
