"""mistral.rs configurations, each a zero-argument factory for `--engine` or
`--engine-variant NAME=engines.adapters.mistralrs.variants:FACTORY`.

The default (`engines.adapters.mistralrs:make_engine`) runs up to 32 sequences with a prefix
cache of 16 sequences; `mistralrs_no_prefix_cache` turns the cache off (every prompt is
prefilled in full), `mistralrs_one_seq` runs one sequence at a time (the rest wait).
"""

from __future__ import annotations

from engines.adapters.mistralrs.adapter import MistralRsEngine, mistralrs_engine

__all__ = ["mistralrs_kv_f16", "mistralrs_no_prefix_cache", "mistralrs_one_seq"]


def mistralrs_no_prefix_cache() -> MistralRsEngine:
    """prefix_cache_n 0: no prefix cache."""
    return mistralrs_engine(label="mistralrs_no_prefix_cache", prefix_cache_n=0)


def mistralrs_one_seq() -> MistralRsEngine:
    """max_seqs 1: one running sequence."""
    return mistralrs_engine(label="mistralrs_one_seq", max_seqs=1)


def mistralrs_kv_f16() -> MistralRsEngine:
    """Deployment precision: the library's CPU default, an f16 KV cache (the adapter's default
    forces F32: MISTRALRS_CPU_KV_F32), over F32 weights; otherwise the default engine."""
    return mistralrs_engine(label="mistralrs_kv_f16", kv_cache_dtype="float16")
