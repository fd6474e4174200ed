"""Zero-argument factories over the model zoo's presets (engines.models.ZOO), for `--engine`,
`--reference-engine` and the matrix script (ci/zoo-matrix.sh): `engines.zoo:<engine>_<preset>`,
the preset's dashes written as underscores. For example `engines.zoo:sequential_tiny_moe` (the
reference on the experts preset) or `engines.zoo:hf_continuous_tiny_gemma_mixed`.

Each factory's engine declares the preset's sliding window and RoPE scaling threshold
(Capabilities.position_thresholds, engines.protocol), where it does not already, so that the suite's
workloads cross them on every engine.

An engine that cannot serve a preset says so when the factory is called (our batched engines
raise ValueError naming what they lack); the adapters' libraries are imported only then, so
this module imports anywhere.

Beside them, named factories of our engines serving the tiny preset's first ZOO_ADAPTERS
seeded LoRA adapters (engines.loras.zoo_loras), for the suite's tenant draws and isolation
check:

    pytest --pyargs engines.testing.conformance \\
        --engine engines.zoo:paged_with_loras \\
        --reference-engine engines.zoo:sequential_with_loras \\
        --engine-variant no_prefix_caching=engines.zoo:paged_no_prefix_caching \\
        --engine-variant small_pool=engines.zoo:paged_small_pool \\
        --engine-variant budget_8=engines.zoo:paged_budget_8

Each serves the same adapter names from the same directories, so every engine compared
serves every drawn request. The paged configurations are engines.paged.variants' (the
default engine's pool, a pool of one whole context, an 8-token budget), with the adapters.

And the pairs of the bench's OpenVINO GenAI comparison (issue 37, docs/benchmarks.md): ours
and OpenVINO GenAI with equal seats and KV memory, on the tiny and small presets:

    taskset -c 0 .venv-openvino/bin/python -m engines.bench closed --no-hf --preset tiny \\
        --engine paged=engines.zoo:paged_tiny_nopc \\
        --engine openvino=engines.zoo:openvino_tiny_nopc
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.models import DEFAULT_PRESET, ZOO, preset_max_model_len, preset_thresholds
from engines.protocol import capabilities_of

if TYPE_CHECKING:
    from engines.paged import PagedEngine
    from engines.sequential import SequentialEngine

__all__ = ["ENGINES", "ZOO_ADAPTERS", "factory", "openvino_small", "openvino_small_nopc",
           "openvino_small_nopc_bf16", "openvino_small_nopc_defaults", "openvino_small_pc",
           "openvino_tiny", "openvino_tiny_nopc", "openvino_tiny_nopc_bf16",
           "openvino_tiny_nopc_defaults", "openvino_tiny_pc", "openvino_tiny_pc_b512",
           "paged_budget_8", "paged_no_prefix_caching", "paged_small", "paged_small_b256",
           "paged_small_compiled", "paged_small_nopc", "paged_small_nopc_compiled",
           "paged_small_nopc_compiled_b256", "paged_small_nopc_compiled_b256_bf16",
           "paged_small_pc", "paged_small_pool", "paged_tiny", "paged_tiny_compiled",
           "paged_tiny_compiled_b256", "paged_tiny_compiled_b512", "paged_tiny_nopc",
           "paged_tiny_nopc_b256", "paged_tiny_nopc_compiled", "paged_tiny_nopc_compiled_b256",
           "paged_tiny_nopc_compiled_b256_bf16", "paged_tiny_pc", "paged_with_loras",
           "sequential_with_loras", "zoo_specs"]

# engine name -> "module:callable" taking the preset as its first argument.
ENGINES: dict[str, str] = {
    "sequential": "engines.sequential:SequentialEngine",
    "static": "engines.slot.static:StaticBatchEngine",
    "continuous": "engines.slot.continuous:ContinuousBatchEngine",
    "paged": "engines.paged:PagedEngine",
    "hf_continuous": "engines.adapters.hf.adapter:hf_continuous",
    "vllm": "engines.adapters.vllm.adapter:vllm_cpu",
    "openvino": "engines.adapters.openvino.adapter:openvino_genai_engine",
    "ortgenai": "engines.adapters.ortgenai.adapter:ortgenai_engine",
    "ct2": "engines.adapters.ct2.adapter:ctranslate2_engine",
}
_PRESETS = {name.replace("-", "_"): name for name in ZOO}


def factory(engine: str, preset: str) -> Callable[[], Any]:
    """The zero-argument factory of `engine` (a key of ENGINES) over `preset` (a zoo name)."""
    if engine not in ENGINES:
        raise ValueError(f"engine: unknown {engine!r}; expected one of {sorted(ENGINES)}")
    if preset not in ZOO:
        raise ValueError(f"preset: unknown {preset!r}; expected one of {list(ZOO)}")
    spec = ENGINES[engine]

    def make() -> Any:
        engine = _load(spec)(preset)
        if not capabilities_of(engine).position_thresholds:
            # A third-party engine does not know our preset: declare its window and RoPE
            # threshold for it, so that the suite's workloads cross them there too.
            _declare_thresholds(engine, preset_thresholds(preset))
        return engine

    make.__name__ = make.__qualname__ = f"{engine}_{preset.replace('-', '_')}"
    return make


def _declare_thresholds(engine: Any, thresholds: dict[str, int]) -> None:
    """Add `thresholds` to what the engine's capabilities() says, at every call (what else it
    says may change while it runs)."""
    if getattr(engine, "capabilities", None) is None:  # a deprecated plain-attribute engine
        engine.position_thresholds = thresholds
        return
    own = engine.capabilities
    engine.capabilities = lambda: dataclasses.replace(own(), position_thresholds=thresholds)


def _load(spec: str) -> Callable[..., Any]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def zoo_specs(engine: str) -> list[str]:
    """`--engine` specs of `engine` on every zoo preset."""
    return [f"engines.zoo:{engine}_{key}" for key in _PRESETS]


# Our engines serving the zoo's LoRA adapters. Imported when a factory is called, as above.
ZOO_ADAPTERS = 3  # a batch mixes ranks 8 and 4, and two adapters share a rank


def _adapters() -> dict[str, str]:
    from engines.loras import zoo_loras

    return zoo_loras(DEFAULT_PRESET, ZOO_ADAPTERS)


def _paged_with_loras(**kwargs: Any) -> PagedEngine:
    from engines.paged import PagedEngine

    return PagedEngine(DEFAULT_PRESET, loras=_adapters(), **kwargs)


def paged_with_loras() -> PagedEngine:
    """The default paged engine, serving the adapters."""
    return _paged_with_loras()


def sequential_with_loras() -> SequentialEngine:
    """The sequential reference, serving the adapters through PEFT."""
    from engines.sequential import SequentialEngine

    return SequentialEngine(DEFAULT_PRESET, loras=_adapters())


def paged_no_prefix_caching() -> PagedEngine:
    """No block ever shared: every tenant computes its own."""
    return _paged_with_loras(enable_prefix_caching=False)


def paged_small_pool() -> PagedEngine:
    """A pool of one whole context for 16 seats: tenants' blocks are evicted and preempted."""
    from engines.paged import DEFAULT_BLOCK_SIZE

    context = preset_max_model_len(DEFAULT_PRESET) or 512
    return _paged_with_loras(max_batch_size=16, num_blocks=-(-context // DEFAULT_BLOCK_SIZE))


def paged_budget_8() -> PagedEngine:
    """8 tokens a step: prompts chunked at boundaries the default never uses."""
    return _paged_with_loras(max_batch_size=8, kv_slots=8, max_num_batched_tokens=8,
                             max_prefill_only_tokens=8)



# The bench's paired OpenVINO GenAI comparison (issue 37; docs/benchmarks.md): equal seats, KV
# memory and cores. Ours, paged `equal_memory` (16 seats, 8 whole contexts of KV), against
# OpenVINO GenAI with 16 sequences over 8 x 16 blocks of 32 tokens (the same KV), per preset;
# `_pc` / `_nopc`: prefix caching on / off in both; `_compiled`: our compiled step (it compiles
# in the bench's warm-up runs); `_b256`, `_b512`: that per-step token budget (OpenVINO GenAI's
# adapter's is 256). Unmarked: the table, ours with its default prefix caching and
# OpenVINO GenAI without (its adapter's default). Until 2026-12-05 the bench's runs replayed
# one trace's prompts as drawn, so with prefix caching on every run found the run before it
# in the cache; every run now sends prompts of its own (engines.bench.fresh).
_PAIR_SEATS = 16
_PAIR_CONTEXTS = 8  # whole contexts of KV memory both engines get
_OPENVINO_BLOCK = 32  # the OpenVINO CPU plugin's block size


def _openvino(preset: str, caching: bool, budget: int = 256, **kwargs: Any) -> Any:
    context = preset_max_model_len(preset) or 512
    return _load(ENGINES["openvino"])(
        preset, max_batch_size=_PAIR_SEATS,
        num_kv_blocks=_PAIR_CONTEXTS * -(-context // _OPENVINO_BLOCK),
        enable_prefix_caching=caching, max_num_batched_tokens=budget, **kwargs)


def _paged(preset: str, caching: bool, **kwargs: Any) -> PagedEngine:
    from engines.paged.variants import equal_memory

    return equal_memory(max_batch_size=_PAIR_CONTEXTS, model=preset,
                        enable_prefix_caching=caching, **kwargs)


def paged_tiny() -> PagedEngine:
    return _paged("tiny", True)


def paged_small() -> PagedEngine:
    return _paged("small", True)


def openvino_tiny() -> Any:
    return _openvino("tiny", False)


def openvino_small() -> Any:
    return _openvino("small", False)


def paged_tiny_nopc() -> PagedEngine:
    return _paged("tiny", False)


def paged_small_nopc() -> PagedEngine:
    return _paged("small", False)


openvino_tiny_nopc = openvino_tiny
openvino_small_nopc = openvino_small


def paged_tiny_pc() -> PagedEngine:
    return _paged("tiny", True)


def paged_small_pc() -> PagedEngine:
    return _paged("small", True)


def openvino_tiny_pc() -> Any:
    return _openvino("tiny", True)


def openvino_small_pc() -> Any:
    return _openvino("small", True)


def paged_tiny_compiled() -> PagedEngine:
    return _paged("tiny", True, compiled="step")


def paged_small_compiled() -> PagedEngine:
    return _paged("small", True, compiled="step")


def paged_tiny_nopc_compiled() -> PagedEngine:
    return _paged("tiny", False, compiled="step")


def paged_small_nopc_compiled() -> PagedEngine:
    return _paged("small", False, compiled="step")


def paged_tiny_compiled_b256() -> PagedEngine:
    return _paged("tiny", True, compiled="step", max_num_batched_tokens=256)


def paged_small_b256() -> PagedEngine:
    return _paged("small", True, max_num_batched_tokens=256)


def paged_tiny_nopc_compiled_b256() -> PagedEngine:
    return _paged("tiny", False, compiled="step", max_num_batched_tokens=256)


def paged_small_nopc_compiled_b256() -> PagedEngine:
    return _paged("small", False, compiled="step", max_num_batched_tokens=256)


def paged_tiny_nopc_b256() -> PagedEngine:  # eager
    return _paged("tiny", False, max_num_batched_tokens=256)


def paged_tiny_compiled_b512() -> PagedEngine:  # a whole 482-token prompt in one step
    return _paged("tiny", True, compiled="step", max_num_batched_tokens=512)


def openvino_tiny_pc_b512() -> Any:  # at the same token budget as the above
    return _openvino("tiny", True, budget=512)


# The same pairs in bf16 (issue 54): ours with bf16 weights, compute and KV blocks; OpenVINO
# GenAI with bf16 inference over a bf16 KV cache (its CPU plugin refuses an f32 cache under bf16
# inference: "expect kvcache type bf16"), and at its CPU defaults (bf16 over a u8 cache). Each
# engine declares its precision, so `closed` compares it with the bf16 ceiling.
_BF16 = {"INFERENCE_PRECISION_HINT": "bf16", "KV_CACHE_PRECISION": "bf16"}


def paged_tiny_nopc_compiled_b256_bf16() -> PagedEngine:
    return _paged("tiny", False, compiled="step", max_num_batched_tokens=256, dtype="bfloat16")


def paged_small_nopc_compiled_b256_bf16() -> PagedEngine:
    return _paged("small", False, compiled="step", max_num_batched_tokens=256, dtype="bfloat16")


def openvino_tiny_nopc_bf16() -> Any:
    return _openvino("tiny", False, precision=_BF16)


def openvino_small_nopc_bf16() -> Any:
    return _openvino("small", False, precision=_BF16)


def openvino_tiny_nopc_defaults() -> Any:  # bf16 over a u8 KV cache where the CPU has bf16
    return _openvino("tiny", False, precision={})


def openvino_small_nopc_defaults() -> Any:
    return _openvino("small", False, precision={})


def __getattr__(name: str) -> Callable[[], Any]:
    # engines.zoo:<engine>_<preset>: the longest engine name that prefixes it wins
    # (hf_continuous before a shorter one).
    for engine in sorted(ENGINES, key=len, reverse=True):
        rest = name.removeprefix(f"{engine}_")
        if rest != name and rest in _PRESETS:
            return factory(engine, _PRESETS[rest])
    raise AttributeError(f"module 'engines.zoo' has no factory {name!r}: expected "
                         f"<engine>_<preset> with engine in {sorted(ENGINES)} and preset in "
                         f"{sorted(_PRESETS)}")
