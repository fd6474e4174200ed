"""A preset (or checkpoint) as a directory mistral.rs loads, written once and cached.

mistral.rs (`Which.Plain`) reads a transformers checkpoint, with three things ours lacks:
- the older config fields: its loaders (0.9.5) deserialize `rope_theta` and `rope_scaling`,
  and refuse transformers 5's `rope_parameters` alone ("missing field `rope_theta`"); so the
  config gets engines.adapters.common.checkpoints.legacy_config's fields;
- a tokenizer (it has no token-id prompt in its Python API: a request's prompt is text, and
  its streamed chunks are text with no ids). So the directory carries a byte-level
  word-level tokenizer whose token i is the word "Ġt{i}" ("Ġ" is the byte-level alphabet's
  space): a prompt of ids is the text " t{i} t{j} ...", which tokenizes back to exactly those
  ids, and every id decodes to its own word, so the adapter reads ids back from text;
- a chat template: the Python API's completion requests are chat ones, so chat_template.jinja
  passes each message's content through unchanged (no role markers, no special tokens).
The weights are hard-linked (copied across file systems), never rewritten. Cache key
(engines.adapters.common.checkpoints.converted_dir): the checkpoint's name, weights and
config, the mistralrs version and LAYOUT (this module's format).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from engines.adapters.common.checkpoints import ConversionError, converted_dir, legacy_config

__all__ = ["CHAT_TEMPLATE", "LAYOUT", "PREFIX", "encode", "mistralrs_dir", "token_of",
           "write_tokenizer"]

# In the directory name: a change to what this module writes is converted afresh.
LAYOUT = "l1"
# The byte-level alphabet's space: "Ġt5" is the text " t5".
PREFIX = "\u0120"
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
_WORD = re.compile(r"t(\d+)")


def encode(ids: Sequence[int]) -> str:
    """The prompt text of token ids: " t{i}" each, which the tokenizer reads back as ids."""
    return "".join(f" t{int(i)}" for i in ids)


def token_of(word: str) -> int:
    """The id of one decoded token's text (" t12", "t12" or "Ġt12" -> 12); ValueError else."""
    m = _WORD.fullmatch(word.strip().removeprefix(PREFIX))
    if m is None:
        raise ValueError(f"token: {word!r} is not a word of the t0..tN tokenizer")
    return int(m.group(1))


def write_tokenizer(path: Path, vocab_size: int) -> None:
    """tokenizer.json + tokenizer_config.json: WordLevel over "Ġt0".."Ġt{V-1}", split on
    whitespace then mapped to the byte-level alphabet with a space in front (so " t5" and
    "t5" are both "Ġt5"), decoded byte-level (so "Ġt5" is " t5" again)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"{PREFIX}t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=f"{PREFIX}t0"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([  # type: ignore[assignment]
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    tok.save(str(path / "tokenizer.json"))
    # No special tokens (no BOS, EOS or padding id the library would add or stop on).
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
              "unk_token": f"{PREFIX}t0", "eos_token": None, "bos_token": None,
              "pad_token": None}
    (path / "tokenizer_config.json").write_text(json.dumps(config) + "\n")


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def _convert(checkpoint: Path, out: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    vocab_size = config.get("vocab_size")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise ConversionError(f"{str(checkpoint)!r}: config.json has no vocab_size")
    (out / "config.json").write_text(json.dumps(legacy_config(config), indent=2) + "\n")
    weights = sorted(checkpoint.glob("*.safetensors*"))  # with a sharded checkpoint's index
    if not weights:
        raise ConversionError(f"{str(checkpoint)!r}: no safetensors weights")
    for f in weights + [checkpoint / "generation_config.json"]:
        if f.is_file():
            _link(f, out / f.name)
    write_tokenizer(out, vocab_size)
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)


@functools.lru_cache(maxsize=8)
def mistralrs_dir(model: str, seed: int) -> Path:
    """The loadable directory of a preset name or a checkpoint directory, written once."""
    from importlib.metadata import version

    return converted_dir(model, seed, library="mistralrs",
                         version=f"{version('mistralrs')}-{LAYOUT}", marker="chat_template.jinja",
                         convert=lambda c, out: _convert(c, out))
