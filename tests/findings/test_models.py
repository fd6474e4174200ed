"""`python -m engines.findings models DIR`: the presets as plain checkpoint folders."""

from __future__ import annotations

import json
from pathlib import Path

from engines.findings.cli import main
from engines.findings.ledger import Entry
from engines.findings.models import SOURCE, presets_of


def test_the_presets_are_the_union_of_the_ledgers() -> None:
    def entry(*presets: str) -> Entry:
        return Entry(Path("r01_x.py"), 1, "lib", "main", presets, None)

    assert presets_of([entry("tiny", "tiny-draft"), entry("tiny"), entry()]) == \
        ["tiny", "tiny-draft"]


def test_a_preset_is_exported_with_its_tokenizer_once(tmp_path: Path) -> None:
    assert main(["models", str(tmp_path), "--preset", "tiny"]) == 0
    folder = tmp_path / "tiny"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", SOURCE} <= names
    assert json.loads((folder / "config.json").read_text())["vocab_size"] > 0
    assert not list(tmp_path.glob(".*partial"))
    # A second export of the same preset leaves the folder as it is (the scripts may be
    # reading it).
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert main(["models", str(tmp_path), "--preset", "tiny"]) == 0
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
