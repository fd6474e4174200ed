"""A preset written out as a checkpoint directory a server can load, with a tokenizer.

Servers take a directory, not a model object. The tokenizer is a WordLevel vocabulary
`t0 .. t{V-1}`: prompts and outputs stay token ids, but vLLM's server returns logprobs only
where a tokenizer is served (it refuses them with --skip-tokenizer-init).
"""

from __future__ import annotations

from pathlib import Path

from engines.adapters.common.tokenizer import TOKENIZER, write_tokenizer

__all__ = ["TOKENIZER", "server_checkpoint", "write_tokenizer"]


def server_checkpoint(preset: str = "tiny", *, seed: int = 0) -> Path:
    """The preset's seeded weights and a tokenizer, written once into a cache directory."""
    # Here, not at module level: torch and transformers take seconds to import, and the
    # adapter and the URL form never need them.
    from engines.adapters.common.checkpoints import checkpoint_dir

    return checkpoint_dir(preset, seed=seed, tokenizer=True)
