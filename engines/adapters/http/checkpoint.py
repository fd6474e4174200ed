"""A preset written out as a checkpoint directory a server can load, with a tokenizer.

Servers take a directory, not a model object. The tokenizer is a WordLevel vocabulary
`t0 .. t{V-1}`: prompts and outputs stay token ids, but vLLM's server returns logprobs only
where a tokenizer is served (it refuses them with --skip-tokenizer-init).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["server_checkpoint", "write_tokenizer"]

# In the directory name: a changed tokenizer is written afresh, never read stale.
TOKENIZER = "wordlevel2"


def write_tokenizer(path: Path, vocab_size: int) -> None:
    """tokenizer.json (+ tokenizer_config.json) mapping token i to the word `t{i}`."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(vocab_size)}
    # unk_token must be in the vocabulary; t0 is as good as any (prompts are ids, never text).
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # type: ignore[assignment]
    tok.save(str(path / "tokenizer.json"))
    # No special tokens but the unknown one. Without these nulls transformers loads the
    # checkpoint's architecture's tokenizer class (Qwen2's), which adds "<|endoftext|>" as
    # EOS with id V: vLLM masks the EOS under min_tokens, and an id past the logits crashes
    # its engine (docs/findings.md).
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
              "unk_token": "t0", "eos_token": None, "bos_token": None, "pad_token": None}
    (path / "tokenizer_config.json").write_text(json.dumps(config) + "\n")


def server_checkpoint(preset: str = "tiny", *, seed: int = 0) -> Path:
    """The preset's seeded weights and a tokenizer, written once into a cache directory."""
    # Here, not at module level: torch and transformers take seconds to import, and the
    # adapter and the URL form never need them.
    from engines.adapters.common.checkpoints import cache_root, preset_digest, publish
    from engines.models import PRESETS, build_preset, save_checkpoint

    if preset not in PRESETS:
        raise ValueError(f"preset: {preset!r} is not one of {sorted(PRESETS)}")
    path = cache_root() / f"{preset}-seed{seed}-{preset_digest(preset)}-{TOKENIZER}"
    if (path / "tokenizer.json").is_file():
        return path

    def build(tmp: Path) -> None:
        model = build_preset(preset, seed=seed)
        save_checkpoint(model, tmp)
        write_tokenizer(tmp, int(model.config.vocab_size))

    return publish(build, path)
