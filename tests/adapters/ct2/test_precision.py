"""The CTranslate2 adapter declares its compute type's precision: float32 by default, int8
weights over a float32 KV cache for ct2_int8, and a compute type it cannot name is refused.

Skipped where ctranslate2 is not importable (run with .venv-ct2/bin/python -m pytest).
"""

from __future__ import annotations

import pytest

pytest.importorskip("ctranslate2", reason="ctranslate2 lives in .venv-ct2 (bash ci/ct2-env.sh)")

import ctranslate2  # noqa: E402

from engines.adapters.ct2 import make_engine  # noqa: E402
from engines.adapters.ct2.adapter import COMPUTE_TYPES, ctranslate2_engine  # noqa: E402
from engines.adapters.ct2.variants import ct2_int8  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402


def test_the_default_and_the_int8_variant_declare_their_compute_types() -> None:
    default, int8 = make_engine(), ct2_int8()
    assert (capabilities_of(default).dtype, capabilities_of(default).kv_dtype) == (
        "float32", "float32")
    assert (capabilities_of(int8).dtype, capabilities_of(int8).kv_dtype) == ("int8", "float32")
    # What the library loaded the model at (int8 weights on a CPU: its int8_float32).
    assert int8._gen.compute_type in ("int8", "int8_float32")
    assert default._gen.compute_type == "float32"


def test_every_compute_type_of_this_cpu_has_a_declaration() -> None:
    assert ctranslate2.get_supported_compute_types("cpu") <= set(COMPUTE_TYPES)


def test_an_unknown_compute_type_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="compute_type: 'int16'"):
        ctranslate2_engine(compute_type="int16")
