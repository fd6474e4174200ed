"""What the OpenVINO CPU plugin computes at, as the engine declares it (Capabilities.dtype,
kv_cache_dtype).

The adapter forces f32 inference and an f32 KV cache (engines.adapters.openvino.adapter
.PROPERTIES) so that greedy tokens match an fp32 reference exactly. A deployment-precision
variant (engines.adapters.openvino.variants) leaves out what it does not set, and the plugin
then picks its own default for this machine: bf16 inference where the CPU has bf16
(avx512_bf16 or AMX), f32 otherwise; a u8 KV cache on x86. So a property left out is read back
from the plugin (`Core.get_property`), not assumed: the declaration follows the machine.
"""

from __future__ import annotations

from collections.abc import Mapping

import openvino

__all__ = ["INFERENCE", "KV_CACHE", "declared_precision"]

INFERENCE = "INFERENCE_PRECISION_HINT"
KV_CACHE = "KV_CACHE_PRECISION"
# OpenVINO's element type names (Type.get_type_name()) as engines.protocol's dtypes; a type
# missing here is refused by name rather than declared as something it is not.
_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64",
          "u8": "u8", "i8": "int8", "u4": "int4", "i4": "int4"}


def _dtype(value: object) -> str:
    name = value.get_type_name() if isinstance(value, openvino.Type) else str(value).lower()
    if name not in _NAMES:
        raise ValueError(f"OpenVINO precision {name!r} has no engines.protocol dtype; expected "
                         f"one of {', '.join(_NAMES)}")
    return _NAMES[name]


def declared_precision(properties: Mapping[str, object]) -> tuple[str, str]:
    """(dtype, kv_cache_dtype) of a CPU pipeline compiled with `properties`: each one they
    set, else the plugin's default on this machine."""
    core: openvino.Core | None = None

    def value(key: str) -> object:
        nonlocal core
        if key in properties:
            return properties[key]
        core = core or openvino.Core()
        return core.get_property("CPU", key)

    return _dtype(value(INFERENCE)), _dtype(value(KV_CACHE))
