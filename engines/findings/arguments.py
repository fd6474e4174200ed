"""The command-line arguments a script gets: its LEDGER's `args` with their placeholders filled.

Most scripts take `--model-dir DIR` alone (the default `args`). llama-server's take the binary
and GGUF files made from the presets by llama.cpp's own converters (`--server-bin BIN --gguf
tiny.gguf --lora a.gguf`), so their LEDGERs list their arguments with placeholders, and the
ledger makes the files with the same helpers (and caches) as this project's llama-server
adapter:

    {model_dir}         the --model-dir folder (the presets as transformers checkpoints)
    {server}            the tool the venv's env script printed (llama-server's binary)
    {gguf:PRESET}       PRESET as GGUF F32 with llama.cpp's "test" vocabulary
    {gguf-bpe:PRESET}   the same with the presets' byte-level BPE as its vocabulary
    {lora:PRESET:I}     zoo adapter I of PRESET (engines.loras.zoo_loras, seed 0) as GGUF
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

DEFAULT_ARGS = ("--model-dir", "{model_dir}")
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
KINDS = re.compile(r"^(?:model_dir|server|gguf:[\w.-]+|gguf-bpe:[\w.-]+|lora:[\w.-]+:\d+)$")


class ArgumentError(ValueError):
    """A placeholder cannot be filled here (no tool, a failed conversion); the message says
    why, and becomes the reason the script cannot run."""


def unknown_placeholders(args: Sequence[str]) -> list[str]:
    """The placeholders in `args` this module cannot fill (checked when a LEDGER is read)."""
    return [name for arg in args for name in PLACEHOLDER.findall(arg) if not KINDS.match(name)]


def needs_tool(args: Sequence[str]) -> bool:
    """Whether filling `args` needs the tool (the binary, or its source tree's converters)."""
    return any(name == "server" or ":" in name
               for arg in args for name in PLACEHOLDER.findall(arg))


def fill(args: Sequence[str], *, model_dir: Path, tool: Path | None) -> list[str]:
    """`args` with every placeholder replaced (converting, once and cached, what they name)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "model_dir":
            return str(model_dir)
        if tool is None:
            raise ArgumentError(f"{{{name}}} needs the tool of a tool venv (llama-server)")
        if name == "server":
            return str(tool)
        return str(_convert(name, tool))

    return [PLACEHOLDER.sub(value, arg) for arg in args]


def _convert(name: str, binary: Path) -> Path:
    kind, _, rest = name.partition(":")
    try:
        # Imported here: they load torch and transformers (and peft, for the adapters), which
        # only llama-server's scripts pay for; a missing one is a reason, not a crash.
        from engines.adapters.common.checkpoints import ConversionError
        from engines.adapters.http.convert import gguf_model
        from engines.adapters.http.llama_lora import gguf_lora
        from engines.loras import zoo_loras

        try:
            if kind in ("gguf", "gguf-bpe"):
                return gguf_model(rest, seed=0, binary=binary, bpe=kind == "gguf-bpe")
            preset, _, index = rest.rpartition(":")
            # Adapter i is the same whatever the count asked (engines.loras.lora_dir).
            peft = list(zoo_loras(preset, int(index) + 1, seed=0).values())
            return gguf_lora(Path(peft[int(index)]), preset=preset, seed=0, binary=binary)
        except (ConversionError, FileNotFoundError, ValueError) as error:
            raise ArgumentError(f"{{{name}}}: {str(error).splitlines()[0]}") from error
    except ImportError as error:
        raise ArgumentError(f"{{{name}}}: {error}") from error
