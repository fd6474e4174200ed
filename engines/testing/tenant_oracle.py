"""Serving a request under a LoRA adapter on an oracle's engine (alone, or the reference's),
where the adapter is known by its directory, not its name.

A workload's request names its adapter as the engine under test serves it; the engine's
`loras` declaration says which directory that is, and the recorder keeps it per request
(Trace.lora_paths). An oracle's engine may serve the same directory under another name (the
tokens do not depend on the name), or not at all: then an engine with LoRAManagement is
handed it under a name of the oracle's own for the one request, and an engine without it
cannot serve the request (NotServable: the check says it was not judged, and why).
"""

from __future__ import annotations

import os

from engines.protocol import Engine, LoRAManagement, loras

__all__ = ["NotServable", "adapter_named", "drop_adapter"]


class NotServable(Exception):
    """The oracle's engine cannot serve the adapter (it neither knows the directory nor has
    LoRAManagement)."""


def _same(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def adapter_named(engine: Engine, path: str | None, tag: str) -> tuple[str | None, bool]:
    """The name under which `engine` serves the adapter in `path` (None: the base model), and
    whether it was added here for the request (drop_adapter it once served)."""
    if path is None:
        return None, False
    for name, served in loras(engine).items():
        if _same(served, path):
            return name, False
    if not isinstance(engine, LoRAManagement):
        raise NotServable(f"it serves no adapter from {path} and has no add_lora "
                          "(engines.protocol.LoRAManagement)")
    name = f"oracle-{tag}"
    engine.add_lora(name, path)
    return name, True


def drop_adapter(engine: Engine, name: str | None) -> None:
    if name is not None and isinstance(engine, LoRAManagement):
        engine.remove_lora(name)
