"""transformers' assisted generation as a one-request engine: `generate` with a draft model
(`assistant_model=`, the zoo's `tiny-draft`) or with prompt lookup
(`prompt_lookup_num_tokens=`), greedy, one request at a time (engines.adapters.hf.generate's
baseline otherwise). The library verifies the drafts itself; greedy, its tokens must be the
model's own greedy continuation, so it is an oracle for our paged engine's speculation that
nobody here wrote (tests/adapters/hf/test_assisted.py), and it runs under the suite like any engine.

Declares greedy decoding only (`max_tokens`, `stop_token_ids`) and `seeds` broken (it
refuses sampled requests): no sampling, seeds or logprobs are sent to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from engines.adapters.hf.generate import HFGenerateEngine
from engines.models import load_model, parse_dtype
from engines.protocol import Capabilities

__all__ = ["HFAssistedEngine", "hf_assisted_draft", "hf_assisted_lookup"]


class HFAssistedEngine(HFGenerateEngine):
    name = "hf-assisted"
    # Greedy only: seeded sampling is refused (the suite then draws no seeded requests).
    CAPABILITIES = Capabilities(
        supported_sampling=frozenset({"max_tokens", "stop_token_ids"}),
        expected_failed_checks={"seeds": "greedy only: sampled requests are refused"})

    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): greedy requests only."""
        return self.CAPABILITIES

    def __init__(self, model: str | Path = "tiny", *, assistant: str | None = None,
                 prompt_lookup: int = 0, seed: int = 0, device: str = "cpu",
                 dtype: str | torch.dtype = torch.float32, **kw: Any) -> None:
        if (assistant is None) == (not prompt_lookup):
            raise ValueError("hf-assisted: give either an assistant model or prompt_lookup")
        super().__init__(model, seed=seed, device=device, dtype=dtype, **kw)
        self.assistant = (None if assistant is None else
                          load_model(assistant, seed=seed, device=device,
                                     dtype=parse_dtype(dtype)))
        self.prompt_lookup = prompt_lookup

    def generate_options(self) -> dict[str, Any]:
        if self.assistant is not None:
            return {"assistant_model": self.assistant}
        return {"prompt_lookup_num_tokens": self.prompt_lookup}


def hf_assisted_draft() -> HFAssistedEngine:
    """Assisted generation with the `tiny-draft` model drafting for `tiny`."""
    return HFAssistedEngine("tiny", assistant="tiny-draft")


def hf_assisted_lookup() -> HFAssistedEngine:
    """Prompt-lookup assisted generation, 3 tokens a draft."""
    return HFAssistedEngine("tiny", prompt_lookup=3)
