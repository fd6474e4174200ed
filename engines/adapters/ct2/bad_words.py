"""The protocol's `bad_words` as CTranslate2's `suppress_sequences` (token sequences never
completed; one token: never generated), which is the whole batch's.

Alone, the library's suppression equals the protocol's: a sequence is banned where the output
so far ends with all but its last token, never across the prompt's end (measured against the
sequential reference, tests/adapters/ct2/test_beams.py). In a batch of prompts of different
lengths the longer prompts' tails are fed through the decoding loop, and the library then
counts them as output: a bad word made of a longer prompt's last token and its first generated
one is banned there, and not alone (docs/findings.md report 30). So a request with bad words
shares a batch only with requests of the same bad words and the same prompt length, where no
prompt has a tail in the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.protocol import Request

__all__ = ["bad_words_key", "suppress_sequences"]


def bad_words_key(request: Request) -> tuple[object, ...]:
    """What a request with bad words must share with the rest of its batch (nothing without)."""
    bad = request.params.bad_words
    if not bad:
        return ()
    return (tuple(sorted(set(bad))), len(request.prompt_token_ids))


def suppress_sequences(request: Request, words: Sequence[str]) -> list[list[str]] | None:
    """The library's argument for the batch's bad words (in its token strings)."""
    bad = request.params.bad_words
    return [[words[t] for t in seq] for seq in sorted(set(bad))] or None
