"""The vLLM adapter declares the dtype it asks vLLM for, and vLLM runs the model at it:
float32 by default, bfloat16 for vllm_bf16 (its KV cache follows: kv_cache_dtype "auto").

Skipped where vllm is not importable (run with .venv-vllm/bin/python -m pytest).
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm not installed (its venv: ci/vllm-env.sh)")

import torch  # noqa: E402

from engines.adapters.vllm import make_engine  # noqa: E402
from engines.adapters.vllm.variants import vllm_bf16  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402


@pytest.mark.parametrize(("factory", "dtype"), [(make_engine, "float32"),
                                                (vllm_bf16, "bfloat16")])
def test_the_declared_dtype_is_the_one_vllm_loaded(factory: object, dtype: str) -> None:
    engine = factory()  # type: ignore[operator]
    caps = capabilities_of(engine)
    assert (caps.dtype, caps.kv_dtype) == (dtype, dtype)
    model = engine._engine.model_config  # what vLLM resolved from the engine's arguments
    assert model.dtype == getattr(torch, dtype)
