"""LoRA adapters on vLLM's engine: protocol names (Request.lora) as vLLM's LoRARequests.

vLLM knows an adapter by an integer id (its LoRA slots and its prefix-cache keys use it) and
loads its PEFT directory on first use. The ids come from one counter per process and a
directory keeps its id while it is served: engines are reused across adapters
(engines.adapters.vllm.pool), and an id that named other weights before would let vLLM's
cached slot serve the old ones. A name removed and added again with another directory gets a
new id (the protocol: "a name removed and added again may name other weights").
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping

from vllm.lora.request import LoRARequest

from engines.protocol import InvalidRequest

__all__ = ["Adapters"]

_ids = itertools.count(1)  # vLLM's lora_int_id must be > 0
_by_path: dict[str, int] = {}


def _id_for(path: str) -> int:
    real = os.path.realpath(path)
    if real not in _by_path:
        _by_path[real] = next(_ids)
    return _by_path[real]


class Adapters:
    """The adapters an engine serves now, by name."""

    def __init__(self, loras: Mapping[str, str] | None) -> None:
        self.paths: dict[str, str] = {}
        for name, path in (loras or {}).items():
            self.add(name, str(path))

    def add(self, name: str, path: str) -> LoRARequest:
        if not name:
            raise ValueError(f"lora name: {name!r}; expected a non-empty name")
        if name in self.paths:
            raise ValueError(f"lora {name!r} is already served (from {self.paths[name]})")
        if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "adapter_config.json"))):
            raise ValueError(f"lora path: {path!r} is no PEFT adapter directory")
        self.paths[name] = path
        return self.request(name)

    def remove(self, name: str, users: list[object]) -> int:
        """Forget `name` (KeyError if unknown; ValueError while a request uses it); returns
        the vLLM id to unload."""
        if name not in self.paths:
            raise KeyError(f"lora {name!r} is not served (served: {sorted(self.paths)})")
        if users:
            raise ValueError(f"lora {name!r} is in use by unfinished requests {users}")
        return _id_for(self.paths.pop(name))

    def request(self, name: str | None) -> LoRARequest | None:
        if name is None:
            return None
        if name not in self.paths:
            raise InvalidRequest(f"lora: {name!r} is not an adapter this engine serves "
                                 f"(it serves {sorted(self.paths) or 'none'})")
        path = self.paths[name]
        return LoRARequest(name, _id_for(path), path)
