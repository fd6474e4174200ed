"""The transformers continuous-batching adapter declares the dtype its model runs at:
float32 by default, bfloat16 for hf_bf16, without casting the default engine's model (the
factory caches a model per preset, seed and dtype)."""

from __future__ import annotations

import torch

from engines.adapters.hf import make_engine
from engines.adapters.hf.variants import hf_bf16
from engines.protocol import capabilities_of


def test_hf_bf16_declares_and_runs_bf16_and_the_default_stays_fp32() -> None:
    bf16 = hf_bf16()
    default = make_engine()
    assert capabilities_of(bf16).dtype == "bfloat16"
    assert capabilities_of(default).dtype == "float32"
    assert next(bf16._model.parameters()).dtype == torch.bfloat16
    assert next(default._model.parameters()).dtype == torch.float32
