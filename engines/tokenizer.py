"""The presets' tokenizer: a byte-level BPE trained offline, deterministically, on text built
here, at each preset's vocabulary size, cached under the cache root.

Token ids stay the protocol's currency; the tokenizer gives text its meaning (stop strings,
detokenized deltas, guided decoding), and its hard cases are real ones: characters of two to
four UTF-8 bytes (accented Latin, CJK, emoji with modifiers and joiners) split across tokens,
merges that span them, and byte fallback: the 256 byte symbols are all in the vocabulary, so
every string encodes and every id sequence decodes (a cut multi-byte character decodes to
U+FFFD, which a streaming detokenizer must hold back).

Layout of the ids: the trained BPE (the 256 byte symbols first, then merges in training
order), then, where the text is too small to train as many merges as the preset has ids
(the Qwen2.5-sized presets), `<|extra_k|>` fillers, and the last id, V - 1, the special
`<|endoftext|>` (what a grammar library calls EOS; no preset model ever means it as one).

`tokenizer_for(preset)` is the directory (tokenizer.json + tokenizer_config.json), what an
engine declares as `tokenizer` (Capabilities.tokenizer); `load(preset)` the
`tokenizers.Tokenizer`. Imports `tokenizers` only when a tokenizer is built or loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engines.models import PRESETS, cache_root

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["EOS", "TOKENIZER_VERSION", "build_tokenizer", "corpus", "load", "tokenizer_for",
           "vocab_size_of"]

# Bumped with any change to the corpus or the training: the cache key says it.
TOKENIZER_VERSION = "bpe1"
EOS = "<|endoftext|>"

# Material for the corpus: syllables for invented words, real words in accented Latin
# scripts, CJK text, emoji (with skin-tone modifiers and zero-width joiners), digits and the
# punctuation of JSON, so that the grammars the suite draws (choices, bounded regexes, small
# JSON objects) have multi-byte and multi-character tokens to be made of.
_SYLLABLES = ("ka", "to", "re", "mi", "an", "el", "or", "is", "un", "ba", "de", "lo", "sa",
              "ne", "ti", "qu", "st", "ch", "th", "er", "in", "on", "at", "es", "ar", "ou")
_WORDS = ("the", "and", "yes", "no", "maybe", "true", "false", "null", "name", "age", "city",
          "color", "red", "green", "blue", "value", "items", "id", "ok", "error", "result")
_LATIN = ("café", "naïve", "élève", "Straße", "año", "ação", "über", "fiancée", "smørrebrød",
          "crème", "brûlée", "Ærø", "łódź", "Škoda", "çà", "déjà", "vu", "Ångström", "œuvre",
          "niño", "coração", "Zürich", "façade", "jalapeño")
_CJK = ("你好", "世界", "中文", "数据", "模型", "批处理", "東京", "日本語", "こんにちは",
        "ありがとう", "カタカナ", "한국어", "안녕하세요", "漢字", "文字列", "测试")
_EMOJI = ("😀", "🎉", "👍", "👍🏽", "🚀", "❤️", "🇫🇷", "👩\u200d💻", "🧪", "✨", "🙂", "🐍",
          "👨\u200d👩\u200d👧", "🌍", "🔥", "✅")
_PUNCT = (".", ",", "!", "?", ":", ";", "-", "(", ")", "'", '"')


def _line(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:  # a small JSON object
        obj = {rng.choice(_WORDS): rng.choice([rng.randrange(1000), rng.choice(_WORDS),
                                                rng.choice(_LATIN), rng.random() < 0.5])
               for _ in range(rng.randrange(1, 4))}
        return json.dumps(obj, ensure_ascii=False)
    if kind == 1:  # CJK, run together as it is written
        return "".join(rng.choice(_CJK) for _ in range(rng.randrange(2, 8))) + "。"
    words = []
    for _ in range(rng.randrange(3, 14)):
        pick = rng.random()
        if pick < 0.35:
            words.append("".join(rng.choice(_SYLLABLES) for _ in range(rng.randrange(1, 4))))
        elif pick < 0.6:
            words.append(rng.choice(_WORDS))
        elif pick < 0.78:
            words.append(rng.choice(_LATIN))
        elif pick < 0.88:
            words.append(rng.choice(_EMOJI))
        elif pick < 0.95:
            words.append(str(rng.randrange(10 ** rng.randrange(1, 5))))
        else:
            words.append(rng.choice(_CJK))
        if rng.random() < 0.15:
            words[-1] += rng.choice(_PUNCT)
    text = " ".join(words)
    return text.capitalize() if kind == 2 else text


def corpus(lines: int = 40_000, *, seed: int = 0) -> list[str]:
    """The training text: `lines` lines drawn from one seeded RNG (the same on every
    machine: Python's random is specified bit for bit for a given seed)."""
    rng = random.Random(seed)
    return [_line(rng) for _ in range(lines)]


def vocab_size_of(preset: str) -> int:
    if preset not in PRESETS:
        raise ValueError(f"preset: unknown {preset!r}; expected one of {sorted(PRESETS)}")
    return int(PRESETS[preset].config["vocab_size"])


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """Train the byte-level BPE of `vocab_size` ids (the last one EOS) on corpus(). One
    thread's worth of determinism: the trainer's merges are ordered by count, then by pair,
    so the same text and size give the same file (tests/engines/test_tokenizer.py holds it to
    it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ValueError(f"vocab_size: {vocab_size} is too small for a byte-level BPE (the 256 "
                         "byte symbols and EOS need 257)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(  # type: ignore[assignment]
        add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1, min_frequency=2, show_progress=False, special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    trained = tok.get_vocab_size()
    fillers = [AddedToken(f"<|extra_{k}|>", special=True, normalized=False)
               for k in range(vocab_size - 1 - trained)]
    tok.add_special_tokens([*fillers, AddedToken(EOS, special=True, normalized=False)])
    if tok.get_vocab_size() != vocab_size or tok.token_to_id(EOS) != vocab_size - 1:
        raise RuntimeError(f"tokenizer: built {tok.get_vocab_size()} ids, EOS at "
                           f"{tok.token_to_id(EOS)}; expected {vocab_size}, EOS at "
                           f"{vocab_size - 1}")
    return tok


def _write(tok: Tokenizer, path: Path) -> None:
    tok.save(str(path / "tokenizer.json"))
    # No BOS, PAD or UNK: a preset's prompts are ids, and a default special token would be
    # added to them. EOS named so that transformers and grammar libraries find it.
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
              "eos_token": EOS, "bos_token": None, "pad_token": None, "unk_token": None,
              "clean_up_tokenization_spaces": False}
    (path / "tokenizer_config.json").write_text(json.dumps(config) + "\n")


def _key(vocab_size: int) -> str:
    import tokenizers

    spec = f"{TOKENIZER_VERSION}-{vocab_size}-{tokenizers.__version__}"
    source = Path(__file__).read_bytes()  # an edit to the corpus or training is a new key
    return f"{spec}-{hashlib.sha256(source).hexdigest()[:10]}"


@functools.lru_cache(maxsize=16)
def tokenizer_for(preset: str | int) -> str:
    """The directory holding the preset's tokenizer.json (a preset name, or a vocabulary
    size), trained once and cached under cache_root()/tokenizers."""
    size = preset if isinstance(preset, int) else vocab_size_of(preset)
    path = cache_root() / "tokenizers" / _key(size)
    if (path / "tokenizer_config.json").is_file():
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    try:
        _write(build_tokenizer(size), tmp)
        tmp.rename(path)
    except OSError:  # a parallel worker published it first
        if not (path / "tokenizer_config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(path)


@functools.lru_cache(maxsize=16)
def load(preset: str | int) -> Tokenizer:
    """The preset's tokenizer (a preset name or a vocabulary size)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(tokenizer_for(preset)) / "tokenizer.json"))
