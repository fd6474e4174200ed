"""A tokenizer for a tokenizer-free preset checkpoint: token i is the word `t{i}`.

Prompts and outputs stay token ids everywhere; a tokenizer file is written only because some
tools will not load a checkpoint without one: vLLM's server returns logprobs only where a
tokenizer is served, and the onnxruntime-genai builder and CTranslate2's converter instantiate
the architecture's tokenizer for Llama-family checkpoints (a sentencepiece one, which a
`tokenizer.json` named here replaces). Imports only `tokenizers`, never torch.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["TOKENIZER", "write_tokenizer"]

# In the directory names of checkpoints that carry it: a changed tokenizer is written afresh,
# never read stale.
TOKENIZER = "wordlevel2"


def write_tokenizer(path: Path, vocab_size: int) -> None:
    """tokenizer.json (+ tokenizer_config.json) mapping token i to the word `t{i}`, 1:1."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"t{i}": i for i in range(vocab_size)}
    # unk_token must be in the vocabulary; t0 is as good as any (prompts are ids, never text).
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # type: ignore[assignment]
    tok.save(str(path / "tokenizer.json"))
    # No special tokens but the unknown one. Without these nulls transformers loads the
    # checkpoint's architecture's tokenizer class (Qwen2's), which adds "<|endoftext|>" as
    # EOS with id V: vLLM masks the EOS under min_tokens, and an id past the logits crashes
    # its engine (docs/findings.md report 13).
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
              "unk_token": "t0", "eos_token": None, "bos_token": None, "pad_token": None}
    (path / "tokenizer_config.json").write_text(json.dumps(config) + "\n")
