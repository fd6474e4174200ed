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
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from engines.models import ZOO, preset_thresholds
from engines.protocol import position_thresholds

__all__ = ["ENGINES", "factory", "zoo_specs"]

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
