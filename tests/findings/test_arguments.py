"""A script's arguments: its LEDGER's `args` (default `--model-dir DIR`) with placeholders."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.findings.arguments import (
    DEFAULT_ARGS,
    ArgumentError,
    fill,
    needs_tool,
    unknown_placeholders,
)
from engines.findings.ledger import LedgerError, parse_ledger

LLAMA = ["--server-bin", "{server}", "--gguf", "{gguf:tiny}", "--gguf", "{gguf-bpe:tiny}",
         "--lora", "{lora:tiny:2}"]


def test_the_default_is_the_model_dir() -> None:
    assert fill(DEFAULT_ARGS, model_dir=Path("/m"), tool=None) == ["--model-dir", "/m"]
    assert not needs_tool(DEFAULT_ARGS)


def test_placeholders_are_checked_when_the_ledger_is_read() -> None:
    assert unknown_placeholders(LLAMA) == []
    assert unknown_placeholders(["{gguf}", "{lora:tiny}", "{model-dir}"]) == \
        ["gguf", "lora:tiny", "model-dir"]
    header = ('LEDGER = {"report": 35, "library": "llama.cpp", "venv": "llama-server", '
              '"presets": ["tiny"], "workaround": None, "args": %r}')
    assert parse_ledger(header % LLAMA, Path("r35_x.py")).args == tuple(LLAMA)
    with pytest.raises(LedgerError, match="unknown placeholders"):
        parse_ledger(header % ["--gguf", "{ggml:tiny}"], Path("r35_x.py"))


def test_the_tool_fills_server_and_is_needed_for_files() -> None:
    assert needs_tool(LLAMA) and needs_tool(["{server}"])
    assert fill(["--server-bin", "{server}", "--m={model_dir}"], model_dir=Path("/m"),
                tool=Path("/bin/llama-server")) == ["--server-bin", "/bin/llama-server",
                                                    "--m=/m"]
    with pytest.raises(ArgumentError, match="needs the tool"):
        fill(["{gguf:tiny}"], model_dir=Path("/m"), tool=None)


def test_a_failed_conversion_is_a_reason_not_a_crash(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A binary with no llama.cpp source tree beside it: the converter cannot be found.
    monkeypatch.delenv("BATCHING_LLAMA_CPP_SRC", raising=False)
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("")
    with pytest.raises(ArgumentError, match=r"\{gguf:tiny\}: .*convert_hf_to_gguf"):
        fill(["{gguf:tiny}"], model_dir=tmp_path, tool=binary)
