"""Incremental detokenization and stop strings: one request's streamed text (StepOutput.text).

Text is the tokenizer's decode of the output tokens (special tokens skipped, as vLLM and
`tokenizers` do by default), handed out as deltas whose concatenation is that decode. Two
things make a delta differ from "decode the new token": a token may carry part of a
multi-byte character (byte-level BPE splits characters anywhere; the decode of a cut
character ends in U+FFFD), and a decoder may treat the first token of a sequence specially
(SentencePiece strips a leading space). So, in the manner of vLLM's incremental detokenizer:
a window of tokens is decoded from a `prefix` offset at which the text so far is complete, and
what the tokens after `read` add is the window's decode minus the decode of prefix..read; while
the window's decode ends in U+FFFD the offsets stay and the tail waits for the character to
complete. What comes before a trailing U+FFFD is complete already and counts at once: a stop
string there completes at this token, not at the one that completes the next character.

Stop strings (SamplingParams.stop) are searched in the text as it grows, each occurrence that
ends in the characters this token made visible (so one spanning two tokens, or two steps, is
found when its last character arrives). Our rule where one token completes several: the one
that ends first in the text wins, and of those ending at the same character the longest.
Like a stop id, a stop string counts only from token min_tokens + 1 on (vLLM's min_tokens
holds back every stop condition; the completing token must be one a stop id could be). The
request ends at the token that completed it (that token stays in the output, like a stop id);
the text is cut before the stop string, or after it with include_stop_str_in_output. Since
text handed out cannot be taken back, the last len(longest stop) - 1 characters are held back
while a stop string could still begin there (not with include_stop_str_in_output: everything
up to its end is output anyway).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["IncrementalText", "load_tokenizer"]

REPLACEMENT = "\ufffd"  # what a decoder makes of a cut multi-byte character


@functools.lru_cache(maxsize=8)
def load_tokenizer(directory: str) -> Tokenizer:
    """The `tokenizers.Tokenizer` of a directory holding tokenizer.json (what engines
    declare as `tokenizer`), loaded once per process."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))


class IncrementalText:
    """One request's text: feed it each output token (`add`), take the delta (`delta`)."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str] = (),
                 include_stop: bool = False) -> None:
        self._tok = tokenizer
        self.stop = tuple(stop)
        self.include_stop = include_stop
        self._tokens: list[int] = []
        self._prefix = 0  # tokens[:prefix] decode to complete text; the window starts here
        self._read = 0  # tokens[:read] are in `_base`
        self._prefix_text = ""  # decode(tokens[prefix:read]), the window's settled head
        self._base = ""  # decode(tokens[:read]): complete text, settled
        self._tail = ""  # what tokens[read:] add, possibly ending in U+FFFD
        self._emitted = 0  # characters of the text handed out
        self.stopped_by: str | None = None  # the stop string that ended the request
        self._cut: int | None = None  # the text's end once a stop string ended it
        self._hold = 0 if include_stop or not self.stop else max(map(len, self.stop)) - 1

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)

    @property
    def visible(self) -> str:
        """The text whose characters are complete: settled, plus the tail up to a trailing
        U+FFFD (a character still cut)."""
        return self._base + self._tail.rstrip(REPLACEMENT)

    def add(self, token: int, *, check_stop: bool = True) -> bool:
        """Take one output token; True if it completed a stop string (checked only when
        `check_stop`: min_tokens reached). Nothing may be added after a stop."""
        assert self._cut is None, "a token after the stop string ended the request"
        searching = check_stop and bool(self.stop)
        before = len(self.visible) if searching else 0
        self._tokens.append(token)
        window = self._decode(self._tokens[self._prefix:])
        tail = window[len(self._prefix_text):]
        if tail.endswith(REPLACEMENT):
            self._tail = tail  # wait for the character to complete
        else:
            self._base += tail
            self._tail = ""
            self._prefix, self._read = self._read, len(self._tokens)
            self._prefix_text = self._decode(self._tokens[self._prefix:self._read])
        if searching:
            self._find_stop(before)
        return self._cut is not None

    def _find_stop(self, before: int) -> None:
        """Look for stop strings ending past `before` (the visible length before this token)."""
        text = self.visible
        best: tuple[int, int, str] | None = None  # (end, -length, stop string)
        for s in self.stop:
            at = text.find(s, max(0, before - len(s) + 1))
            if at >= 0:
                found = (at + len(s), -len(s), s)
                best = found if best is None or found < best else best
        if best is not None:
            end, neg_len, s = best
            self.stopped_by = s
            self._cut = end if self.include_stop else end + neg_len

    def text(self) -> str:
        """The whole text so far as a finished request would have it: the full decode, or
        cut at the stop string."""
        full = self._base + self._tail
        return full if self._cut is None else full[: self._cut]

    def delta(self, *, final: bool) -> str:
        """The text not handed out yet that may be now: everything when `final` (the request
        finished: a cut character is U+FFFD for good) or cut at a stop string; else the
        visible text less what a stop string could still claim."""
        if not (final or self._cut is not None or self._tail):
            # The common case (every character complete, no stop cut): the settled text
            # alone, without building `visible` and `text()` (a per-token cost of every
            # streamed request).
            upto = max(self._emitted, len(self._base) - self._hold)
            out = self._base[self._emitted:upto]
            self._emitted = upto
            return out
        if final or self._cut is not None:
            upto = len(self.text())
        else:
            upto = max(self._emitted, len(self.visible) - self._hold)
        out = self.text()[self._emitted:upto]
        self._emitted = max(self._emitted, upto)
        return out
