"""Model presets and loading: transformers configs with seeded random weights, or a local
checkpoint (safetensors, offline). Token ids only; no tokenizer is ever needed."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

DEFAULT_PRESET = "tiny"
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True)
class Preset:
    config: dict[str, Any]  # Qwen2Config keyword arguments
    weight_std: float  # std of the seeded normal weights
    max_model_len: int  # default engine context (prompt + max_tokens)
    purpose: str


_QWEN25_COMMON: dict[str, Any] = {
    "vocab_size": 151936,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}

PRESETS: dict[str, Preset] = {
    # Head size 32: the smallest vLLM's CPU attention accepts, so vLLM can run these weights.
    "tiny": Preset(
        {
            "vocab_size": 1024,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 1024,
            "tie_word_embeddings": False,
        },
        weight_std=0.15,
        max_model_len=512,
        purpose="tests: ~280k parameters, fp32, a step takes about a millisecond",
    ),
    "small": Preset(
        {
            "vocab_size": 8192,
            "hidden_size": 512,
            "intermediate_size": 1408,
            "num_hidden_layers": 8,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": True,
        },
        weight_std=0.05,
        max_model_len=1024,
        purpose="CPU benchmarks: ~27M parameters, the model dominates a step on 2 cores",
    ),
    "qwen2.5-0.5b": Preset(
        {
            **_QWEN25_COMMON,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
        },
        weight_std=0.02,
        max_model_len=4096 + 256,
        purpose="GPU runs in fp16/bf16: Qwen2.5-0.5B's shapes",
    ),
    "qwen2.5-1.5b": Preset(
        {
            **_QWEN25_COMMON,
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
        },
        weight_std=0.02,
        max_model_len=4096 + 256,
        purpose="GPU runs in fp16/bf16: Qwen2.5-1.5B's shapes (docs/references.md)",
    ),
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float16": torch.float16,
        "fp16": torch.float16,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
    }
    if dtype not in names:
        raise ValueError(f"dtype: unknown {dtype!r}; expected one of {sorted(names)}")
    return names[dtype]


def _seeded_init(model: torch.nn.Module, std: float, seed: int) -> None:
    # One generator walked in parameter-name order: the same preset and seed give the same bits
    # on every machine and device (drawn on the CPU in fp32, then cast and moved).
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                value = torch.ones(param.shape)
            elif param.dim() == 1:  # biases: small, so attention is not dominated by them
                value = torch.randn(param.shape, generator=gen) * (std / 4)
            else:
                value = torch.randn(param.shape, generator=gen) * std
            param.copy_(value.to(param.dtype))


def build_preset(name: str, *, seed: int = DEFAULT_SEED) -> PreTrainedModel:
    """A fresh fp32 CPU model of the named preset with seeded random weights."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown {name!r}; expected one of {sorted(PRESETS)}")
    preset = PRESETS[name]
    config = Qwen2Config(**preset.config)
    config.eos_token_id = None  # random weights: no token means "end"; budgets and stops do
    config.bos_token_id = None
    config.pad_token_id = None
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = Qwen2ForCausalLM(config)
    _seeded_init(model, preset.weight_std, seed)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0  # generate() wants one; never emitted as a stop
    return model.eval()


def load_checkpoint(path: str | Path) -> PreTrainedModel:
    """A local checkpoint directory (config.json + safetensors), strictly offline."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"model: {str(path)!r} is neither a preset nor a checkpoint directory")
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, use_safetensors=True, dtype=torch.float32
    )
    return model.eval()


@functools.lru_cache(maxsize=8)
def _cached(spec: str, seed: int, device: str, dtype: torch.dtype) -> PreTrainedModel:
    model = build_preset(spec, seed=seed) if spec in PRESETS else load_checkpoint(spec)
    return model.to(device=device, dtype=dtype)  # type: ignore[call-arg]


def load_model(
    spec: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = torch.float32,
) -> PreTrainedModel:
    """A preset name or checkpoint directory -> an eval-mode model on device/dtype.

    Models are shared per (spec, seed, device, dtype): engines only read weights, so building
    a fresh engine per test example costs no model build.
    """
    return _cached(str(spec), seed, str(torch.device(device)), parse_dtype(dtype))


def save_checkpoint(model: PreTrainedModel, path: str | Path) -> Path:
    """Write a model as a safetensors checkpoint directory other engines (vLLM) can load."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    return path


def preset_max_model_len(spec: str | Path) -> int | None:
    preset = PRESETS.get(str(spec))
    return preset.max_model_len if preset else None
