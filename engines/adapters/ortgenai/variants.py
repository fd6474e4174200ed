"""onnxruntime-genai configurations, each a zero-argument factory for `--engine` or
`--engine-variant NAME=engines.adapters.ortgenai.variants:FACTORY`.

On the CPU the library runs its static-batch scheduler (engines.adapters.ortgenai.adapter), and
the one scheduler setting it exposes there is `engine.static_batching.max_batch_size`. Paged
KV, chunked prefill and prefix caching exist only for paged-attention models, which its
builder makes for CUDA only: there are no variants for them here.

Both variants set what the library reports as `configured_max_batch_size` (the adapter's
`max_concurrency`), but onnxruntime-genai 0.18.0's static scheduler batches up to 4 requests
whatever it is set to (docs/findings.md, report 10): until that is fixed, these run exactly as
the default does, and the suite sizes its workloads by the declared number only.
"""

from __future__ import annotations

from engines.adapters.ortgenai.adapter import OrtGenaiEngine, ortgenai_engine

__all__ = ["MAX_BATCH", "ortgenai_batch1", "ortgenai_fp16", "ortgenai_guided", "ortgenai_int4",
           "ortgenai_max"]

# Not the 256 its builder accepts for a dynamic-batching section: the suite sizes workloads by
# the declared concurrency (up to 2n + 1 requests), and 16 already exceeds what the static
# scheduler runs at once.
MAX_BATCH = 16


def ortgenai_batch1() -> OrtGenaiEngine:
    """max_batch_size 1: one request at a time, by the configuration."""
    return ortgenai_engine(label="ortgenai_batch1", max_batch_size=1)


def ortgenai_max() -> OrtGenaiEngine:
    """max_batch_size 16: more than the static scheduler's 4."""
    return ortgenai_engine(label="ortgenai_max", max_batch_size=MAX_BATCH)


def ortgenai_guided() -> OrtGenaiEngine:
    """The default configuration declaring guided decoding (the library's guidance), which the
    default leaves out: its guidance fails on grammars that need a token carrying part of a
    UTF-8 character (docs/findings.md report 29), so this one is for runs that judge the
    mapping and find that bug, not for a run that must pass."""
    return ortgenai_engine(label="ortgenai_guided", guided=True)


# Deployment precision: the builder's other precisions for a CPU (-p fp16, -p int4), each built
# once and cached apart from the fp32 model; the default batch size.
def ortgenai_fp16() -> OrtGenaiEngine:
    """fp16 weights, activations and KV cache (the builder's -p fp16 -e cpu). On 0.18.0 a
    model with fewer KV heads than heads (the tiny preset) fails its first decoding step:
    the builder's shape annotations of repeat_kv (docs/findings.md, report 48)."""
    return ortgenai_engine(label="ortgenai_fp16", precision="fp16")


def ortgenai_int4() -> OrtGenaiEngine:
    """int4 matrix weights (MatMulNBits), fp32 KV cache (-p int4 -e cpu; accuracy level 4
    quantizes the activations to int8 for each product). Its reference holds the same int4
    weights: `--reference-engine engines.adapters.ortgenai.reference:sequential_int4
    --parity-tolerance=0.25` (that module says why int8's tolerance)."""
    return ortgenai_engine(label="ortgenai_int4", precision="int4")
