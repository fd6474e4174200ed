"""Zero-argument factories over the model zoo's presets (engines.models.ZOO), for `--engine`,
`--reference-engine` and the matrix script (ci/zoo-matrix.sh): `engines.zoo:<engine>_<preset>`,
the preset's dashes written as underscores. For example `engines.zoo:sequential_tiny_moe` (the
reference on the experts preset) or `engines.zoo:hf_continuous_tiny_gemma_mixed`.

Each factory's engine declares the preset's sliding window and RoPE scaling threshold
(`position_thresholds`, engines.protocol), where it does not already, so that the suite's
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
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.models import DEFAULT_PRESET, ZOO, preset_max_model_len, preset_thresholds
from engines.protocol import position_thresholds

if TYPE_CHECKING:
    from engines.paged import PagedEngine
    from engines.sequential import SequentialEngine

__all__ = ["ENGINES", "ZOO_ADAPTERS", "factory", "paged_budget_8", "paged_no_prefix_caching",
           "paged_small_pool", "paged_with_loras", "sequential_with_loras", "zoo_specs"]

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
    module, _, attr = ENGINES[engine].partition(":")

    def make() -> Any:
        engine = getattr(importlib.import_module(module), attr)(preset)
        if not position_thresholds(engine):
            # A third-party engine does not know our preset: declare its window and RoPE
            # threshold for it, so that the suite's workloads cross them there too.
            engine.position_thresholds = preset_thresholds(preset)
        return engine

    make.__name__ = make.__qualname__ = f"{engine}_{preset.replace('-', '_')}"
    return make


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
