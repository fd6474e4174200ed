"""The OpenVINO GenAI adapter declares the precision its pipeline is compiled with: f32 by
default, the CPU plugin's own defaults read back from the plugin for openvino_cpu_defaults,
an f16 KV cache for openvino_kv_f16.

Skipped where openvino_genai is not importable (run with .venv-openvino/bin/python -m pytest).
"""

from __future__ import annotations

import pytest

pytest.importorskip("openvino_genai", reason="openvino_genai lives in .venv-openvino "
                    "(bash ci/openvino-env.sh)")

import openvino  # noqa: E402

from engines.adapters.openvino import make_engine  # noqa: E402
from engines.adapters.openvino.precision import declared_precision  # noqa: E402
from engines.adapters.openvino.variants import openvino_cpu_defaults, openvino_kv_f16  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402

_OV = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "u8": "u8", "int8": "i8"}


def _plugin_default(key: str) -> str:
    return str(openvino.Core().get_property("CPU", key).get_type_name())


def test_the_default_engine_declares_the_f32_it_forces() -> None:
    caps = capabilities_of(make_engine())
    assert (caps.dtype, caps.kv_cache_dtype) == ("float32", "float32")


def test_the_cpu_defaults_variant_declares_what_the_plugin_picks_on_this_machine() -> None:
    caps = capabilities_of(openvino_cpu_defaults())
    assert _OV[caps.dtype] == _plugin_default("INFERENCE_PRECISION_HINT")
    assert _OV[str(caps.kv_cache_dtype)] == _plugin_default("KV_CACHE_PRECISION")


def test_the_kv_f16_variant_declares_an_f16_cache_over_the_plugins_inference() -> None:
    caps = capabilities_of(openvino_kv_f16())
    assert caps.kv_cache_dtype == "float16"
    assert _OV[caps.dtype] == _plugin_default("INFERENCE_PRECISION_HINT")


def test_a_precision_without_a_protocol_dtype_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'nf4' has no engines.protocol dtype"):
        declared_precision({"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "nf4"})
