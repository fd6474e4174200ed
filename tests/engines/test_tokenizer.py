"""The presets' byte-level BPE (engines.tokenizer): deterministic, lossless on multi-byte text,
one id per preset vocabulary entry, carried by our engines and by the exported checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.adapters.common.checkpoints import checkpoint_dir
from engines.models import PRESETS
from engines.protocol import capabilities_of
from engines.tokenizer import EOS, build_tokenizer, load, tokenizer_for

# Two to four UTF-8 bytes a character, joiners and modifiers, and JSON punctuation.
TEXTS = ("Café naïve Straße ação", "你好，世界。日本語のテキスト", "👩\u200d💻 👍🏽 🇫🇷 ❤️",
         '{"name": "Zürich", "ok": true}', "mixed: año 数据 🚀 42", "\u00e9\u0301 e\u0301")


def test_training_is_deterministic() -> None:
    # Same text, same size: the same bytes, and the cached file is that same file.
    first, second = build_tokenizer(1024).to_str(), build_tokenizer(1024).to_str()
    assert first == second
    cached = json.loads((Path(tokenizer_for("tiny")) / "tokenizer.json").read_text())
    assert cached == json.loads(first)


@pytest.mark.parametrize("text", TEXTS)
def test_multibyte_text_round_trips(text: str) -> None:
    tok = load("tiny")
    ids = tok.encode(text).ids
    assert all(0 <= i < 1024 for i in ids)
    assert tok.decode(ids) == text


def test_a_character_is_split_across_tokens() -> None:
    # The hard case of detokenizing a stream is there: some character's bytes are spread
    # over several tokens, none of which decodes to it alone.
    tok = load("tiny")
    split = [ch for ch in "".join(TEXTS) if len(tok.encode(ch).ids) > 1]
    assert split
    ids = tok.encode(split[0]).ids
    assert all(split[0] not in tok.decode([i]) for i in ids)


def test_vocab_size_is_each_presets() -> None:
    for name, preset in PRESETS.items():
        tok = load(name)
        size = preset.config["vocab_size"]
        assert tok.get_vocab_size() == size, name
        assert tok.token_to_id(EOS) == size - 1, name
        assert {tok.id_to_token(i) is not None for i in range(0, size, 97)} == {True}, name


def test_engines_declare_it_and_checkpoints_carry_it() -> None:
    from engines.sequential import SequentialEngine

    engine = SequentialEngine("tiny")
    assert capabilities_of(engine).tokenizer == tokenizer_for(1024)
    ckpt = checkpoint_dir("tiny", seed=0, tokenizer="bpe")
    assert (ckpt / "tokenizer.json").read_bytes() == (
        Path(tokenizer_for("tiny")) / "tokenizer.json").read_bytes()
    # The word-level one stays where adapters depend on its t{i} words.
    words = json.loads((checkpoint_dir("tiny", seed=0, tokenizer=True) / "tokenizer.json")
                       .read_text())
    assert words["model"]["type"] == "WordLevel"
    with pytest.raises(ValueError, match="tokenizer"):
        checkpoint_dir("tiny", seed=0, tokenizer="sentencepiece")


def test_transformers_reads_the_same_ids() -> None:
    # What an adapter's library sees in the checkpoint: the same ids, no tokens added.
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tokenizer_for("tiny"))
    tok = load("tiny")
    for text in TEXTS:
        assert hf(text)["input_ids"] == tok.encode(text).ids
        assert hf.decode(tok.encode(text).ids) == text
    assert hf.eos_token_id == 1023
