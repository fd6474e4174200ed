"""LoRA adapters by name, for every engine of ours: which names an engine serves (built with
or added at run time), the request check, and an adapter read from PEFT's format into plain
tensors for our own forwards.

A PEFT adapter directory holds adapter_config.json (rank `r`, `lora_alpha`, the targets) and
adapter_model.safetensors, keys `base_model.model.<module path>.lora_A.weight` ([r, in]) and
`...lora_B.weight` ([out, r]); a targeted Linear computes W x + scaling * B (A x), scaling
alpha / r (alpha / sqrt(r) with use_rslora). What PEFT can add beyond that (DoRA, biases,
per-module ranks, modules_to_save) is refused by name, never served as plain LoRA.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from engines.protocol import InvalidRequest, Request

__all__ = ["LoraNames", "LoraWeights", "read_peft"]


@dataclass(frozen=True, slots=True)
class LoraWeights:
    """One adapter: per (layer index, projection name), A [r, in] and B [out, r], and the
    scaling that multiplies B (A x)."""

    path: str
    rank: int
    scaling: float
    modules: Mapping[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]


_REFUSED = {"use_dora": "DoRA", "lora_bias": "LoRA biases", "modules_to_save": "modules_to_save",
            "rank_pattern": "per-module ranks (rank_pattern)",
            "alpha_pattern": "per-module alphas (alpha_pattern)",
            "layer_replication": "layer_replication"}


def read_peft(path: str | Path) -> LoraWeights:
    """A PEFT LoRA directory as tensors on the CPU in fp32; ValueError naming what of it our
    forwards do not compute."""
    from safetensors.torch import load_file

    path = Path(path)
    config_file = path / "adapter_config.json"
    if not config_file.is_file():
        raise ValueError(f"lora: {str(path)!r} is not a PEFT adapter directory (no "
                         "adapter_config.json)")
    config = json.loads(config_file.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"lora: {str(path)!r} is a {config.get('peft_type')} adapter, not LoRA")
    for key, what in _REFUSED.items():
        if config.get(key):
            raise ValueError(f"lora: {str(path)!r} uses {what}, which is not implemented")
    if config.get("bias", "none") != "none":
        raise ValueError(f"lora: {str(path)!r} trains biases (bias={config['bias']!r}), "
                         "which is not implemented")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    tensors = load_file(str(path / "adapter_model.safetensors"))
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        parts = key.split(".")
        if "layers" not in parts or parts[-2] not in ("lora_A", "lora_B"):
            raise ValueError(f"lora: {str(path)!r} holds {key!r}, which is no LoRA A or B "
                             "weight of a decoder layer")
        layer = int(parts[parts.index("layers") + 1])
        pairs.setdefault((layer, parts[-3]), {})[parts[-2]] = value.float()
    modules = {}
    for where, ab in pairs.items():
        if set(ab) != {"lora_A", "lora_B"}:
            raise ValueError(f"lora: {str(path)!r} has {sorted(ab)} for layer {where[0]} "
                             f"{where[1]}, expected lora_A and lora_B")
        modules[where] = (ab["lora_A"], ab["lora_B"])
    return LoraWeights(str(path), rank, scaling, modules)


class LoraNames:
    """The adapters an engine serves by name (engines.protocol.LoRAManagement's semantics):
    a request naming another is refused at add_request, naming the field; an adapter in use
    by an unfinished request cannot be removed."""

    def __init__(self, loras: Mapping[str, str | Path] | None) -> None:
        self.paths: dict[str, str] = {}
        for name, path in (loras or {}).items():
            self.check_new(name, path)
            self.paths[name] = str(path)

    def check_new(self, name: object, path: object) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"lora name: {name!r} is not a non-empty string")
        if name in self.paths:
            raise ValueError(f"lora name: {name!r} is already served (remove_lora it first)")
        if not isinstance(path, str | Path) or not (Path(path) / "adapter_config.json").is_file():
            raise ValueError(f"lora {name!r}: {path!r} is not a PEFT adapter directory")

    def check_request(self, request: Request) -> None:
        if request.lora is not None and request.lora not in self.paths:
            served = ", ".join(sorted(self.paths)) or "none"
            raise InvalidRequest(f"lora: {request.lora!r} is not an adapter this engine serves "
                                 f"(served: {served})")

    def check_removable(self, name: str, users: Collection[Hashable]) -> None:
        if name not in self.paths:
            raise KeyError(f"lora: {name!r} is not an adapter this engine serves")
        if users:
            raise ValueError(f"lora: {name!r} is in use by unfinished request(s) "
                             f"{sorted(map(str, users))}")
