"""CTranslate2 configurations, each a zero-argument factory for `--engine` or
`--engine-variant NAME=engines.adapters.ct2.variants:FACTORY`.

The library's one scheduling knob is the batch size: `ct2_batch1` runs requests strictly one
at a time (the rest wait), `ct2_max` batches up to 16.
"""

from __future__ import annotations

from engines.adapters.ct2.adapter import CT2Engine, ctranslate2_engine

__all__ = ["MAX_BATCH", "ct2_batch1", "ct2_int8", "ct2_max"]

# The library sets no limit; 16 (twice the default) keeps the suite's bursts, 2 x 16 + 1
# requests, cheap enough for CI while a batch still holds every request of most workloads.
MAX_BATCH = 16


def ct2_batch1() -> CT2Engine:
    """max_batch_size 1: one request a batch."""
    return ctranslate2_engine(label="ct2_batch1", max_batch_size=1)


def ct2_max() -> CT2Engine:
    """max_batch_size 16: up to 16 waiting requests with the same options in one batch."""
    return ctranslate2_engine(label="ct2_max", max_batch_size=MAX_BATCH)


def ct2_int8() -> CT2Engine:
    """Deployment precision: compute type int8 (int8 weights and matrix products, the rest and
    the KV cache in float32), declared as such; the default batch size. ctranslate2 4.8.5 has
    no bfloat16 compute type on a CPU (engines.adapters.ct2.adapter.COMPUTE_TYPES)."""
    return ctranslate2_engine(label="ct2_int8", compute_type="int8")
