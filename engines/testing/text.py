"""The text oracle: what an engine's streamed text and stop strings must come to, worked out
from its tokens with the `tokenizers` library's plain decode of the tokenizer it declares
(Capabilities.tokenizer), nothing incremental: the decode of a request's whole output
is what its deltas add up to, and the prefixes' decodes say where a stop string completed.

A cut multi-byte character decodes to U+FFFD; what comes before a trailing run of them is
complete. Stop strings (never containing U+FFFD: the suite draws none) are found in that
complete text. Engines differ on when a stop string followed, in the same token, by a cut
character has completed: at that token (ours: its characters are complete) or once the
character completes and the text settles (vLLM's detokenizer holds back an unsettled tail
and searches only settled text). Both are accepted: `stop_tokens` gives the earliest and the
latest token a correct engine can stop at.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["REPLACEMENT", "StopAt", "cuts", "decode", "stop_tokens", "tokenizer", "visible"]

REPLACEMENT = "\ufffd"


@functools.lru_cache(maxsize=8)
def tokenizer(directory: str) -> Tokenizer:
    """The tokenizer.json in `directory`, loaded once."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))


def decode(tok: Tokenizer, ids: Sequence[int]) -> str:
    """The plain decode (special tokens skipped, the library's and vLLM's default)."""
    return tok.decode(list(ids), skip_special_tokens=True)


def visible(text: str) -> str:
    """The complete part of a decode: up to a trailing run of U+FFFD (a cut character)."""
    return text.rstrip(REPLACEMENT)


def _has_stop(text: str, stop: Sequence[str]) -> bool:
    return any(s in text for s in stop)


@dataclass(frozen=True, slots=True)
class StopAt:
    """Where a correct engine ends a request on a stop string: after `earliest` tokens (the
    first prefix whose complete text holds one), or at most after `latest` (the first whose
    whole decode holds one and is settled, no cut character at its end)."""

    earliest: int
    latest: int | None  # None: the output never settles with a stop string in it


def stop_tokens(tok: Tokenizer, ids: Sequence[int], stop: Sequence[str], *,
                min_tokens: int = 0) -> StopAt | None:
    """Where a stop string completes in the output `ids` (counting from token
    min_tokens + 1, as stop ids do), or None if none completes within them."""
    earliest = None
    for k in range(max(1, min_tokens + 1), len(ids) + 1):
        text = decode(tok, ids[:k])
        if earliest is None and _has_stop(visible(text), stop):
            earliest = k
        if earliest is not None and not text.endswith(REPLACEMENT):
            return StopAt(earliest, k)
    return None if earliest is None else StopAt(earliest, None)


def cuts(text: str, before: int, stop: Sequence[str], include: bool) -> set[str]:
    """Where the text of a request stopped by a stop string may end: `text` (the decode of
    its tokens) cut before (or, `include`, after) an occurrence of a stop string that ends
    past `before` characters (it completed in the last token)."""
    out = set()
    for s in stop:
        at = text.find(s, max(0, before - len(s) + 1))
        while at >= 0:
            out.add(text[: at + len(s)] if include else text[:at])
            at = text.find(s, at + 1)
    return out
