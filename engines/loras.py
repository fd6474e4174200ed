"""Seeded LoRA adapters for the presets, built offline with PEFT and saved in PEFT's format
(adapter_config.json + adapter_model.safetensors), each once, under the cache root.

An adapter targets every attention and MLP projection the architecture has as a plain
nn.Linear (q/k/v/o and gate/up/down; Phi-3's fused qkv_proj and gate_up_proj; a mixture of
experts' experts are no Linear, so there only attention). Ranks alternate 8 and 4, so that a
batch of adapters mixes ranks; weights are seeded normals large enough that an adapter
changes greedy tokens (tests/engines/test_loras.py holds every adapter to that: a zero B, PEFT's
default init, would make every adapter the base model and every LoRA check vacuous).

`zoo_loras(preset, n)` is what engines are built with: adapter name -> directory.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engines.models import DEFAULT_SEED, PRESETS, build_preset, cache_root

__all__ = ["LORA_TARGETS", "MAX_ZOO_LORAS", "LoraSpec", "lora_dir", "lora_name", "lora_spec",
           "lora_targets", "zoo_loras"]

# Projection names PEFT may target, in the order a decoder layer computes them.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
                "gate_up_proj", "down_proj")
MAX_ZOO_LORAS = 8  # adapters per preset (the bench batches up to 8 different ones)


@dataclass(frozen=True, slots=True)
class LoraSpec:
    rank: int
    alpha: int
    std_a: float  # std of the seeded normal lora_A weights
    std_b: float  # and of lora_B's (PEFT's own init leaves B at zero: a no-op adapter)


def lora_spec(index: int) -> LoraSpec:
    """The index-th adapter's shape: ranks 8, 4, 8, ...; alpha 16 (scaling 2 and 4)."""
    if not 0 <= index < MAX_ZOO_LORAS:
        raise ValueError(f"lora index: {index} is outside 0..{MAX_ZOO_LORAS - 1}")
    return LoraSpec(rank=8 if index % 2 == 0 else 4, alpha=16, std_a=0.2, std_b=0.1)


def lora_name(preset: str, index: int) -> str:
    return f"{preset}-lora{index}"


def lora_targets(model: Any) -> list[str]:
    """The LORA_TARGETS this model has as nn.Linear modules."""
    have = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)}
    return [t for t in LORA_TARGETS if t in have]


def _digest(preset: str, index: int, seed: int) -> str:
    import peft

    text = repr((PRESETS[preset], lora_spec(index), seed, peft.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _build(preset: str, index: int, seed: int, out: Path) -> None:
    from peft import LoraConfig, get_peft_model

    spec = lora_spec(index)
    model = build_preset(preset, seed=seed)  # a fresh copy: PEFT wraps it in place
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=0.0,
                        target_modules=lora_targets(model), bias="none",
                        task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    # One generator per (seed, adapter), walked in parameter-name order: the same bits on
    # every machine.
    gen = torch.Generator().manual_seed(seed * 1000 + index + 1)
    with torch.no_grad():
        for name, param in sorted(peft_model.named_parameters(), key=lambda kv: kv[0]):
            if "lora_A" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * spec.std_a)
            elif "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * spec.std_b)
    peft_model.save_pretrained(str(out), safe_serialization=True)


def _publish(build: Callable[[Path], None], path: Path) -> Path:
    # Built beside its place and renamed into it: a half-written adapter is never found, and
    # parallel test workers racing for it are harmless.
    if (path / "adapter_config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        build(tmp)
        tmp.rename(path)
    except OSError:
        if not (path / "adapter_config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def lora_dir(preset: str, index: int, *, seed: int = DEFAULT_SEED) -> Path:
    """The index-th seeded adapter of `preset` (whose weights are seeded by `seed`), built
    once: keyed by the preset's definition, the adapter's, the seed and PEFT's version."""
    if preset not in PRESETS:
        raise ValueError(f"preset: unknown {preset!r}; expected one of {sorted(PRESETS)}")
    lora_spec(index)  # refuses a bad index before anything is built
    path = cache_root() / "lora-adapters" / (
        f"{lora_name(preset, index)}-seed{seed}-{_digest(preset, index, seed)}")
    return _publish(lambda tmp: _build(preset, index, seed, tmp), path)


def zoo_loras(preset: str, n: int = 2, *, seed: int = DEFAULT_SEED) -> dict[str, str]:
    """The first n adapters of `preset`: name -> PEFT directory, what engines are built with."""
    if not 1 <= n <= MAX_ZOO_LORAS:
        raise ValueError(f"n: {n} adapters asked; the zoo has 1..{MAX_ZOO_LORAS} per preset")
    return {lora_name(preset, i): str(lora_dir(preset, i, seed=seed)) for i in range(n)}
