"""Stop strings and text: transformers' StopStringCriteria decides which token ends a request
(the first whose text completes a stop string, overhangs at either end included), the
`tokenizers` decode (special tokens skipped) is the text, and the text is cut at the stop
string (before it, or after it with include_stop_str_in_output).

Our protocol's rules beside StopStringCriteria's: a stop string counts only from token
min_tokens + 1 on (as a stop id: `AfterMinTokens`); of the occurrences the last token
completed, the one ending first in the text is the one cut at, and of those ending at one
character the longest. The text comes whole, in the request's one output: a reference
served alone owes its deltas' concatenation, not their timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.generation import StoppingCriteria, StopStringCriteria

__all__ = ["AfterMinTokens", "cut_text", "stop_criterion"]

REPLACEMENT = "\ufffd"  # a decoder's make of a multi-byte character cut short


class AfterMinTokens(StoppingCriteria):
    """A criterion that counts from the generated token min_tokens + 1 on; `fired` says
    whether it ended the request."""

    def __init__(self, inner: StoppingCriteria, prompt_len: int, min_tokens: int) -> None:
        self.inner = inner
        self.prompt_len = prompt_len
        self.min_tokens = min_tokens
        self.fired = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        done = self.inner(input_ids, scores, **kwargs)
        if input_ids.shape[-1] - self.prompt_len <= self.min_tokens:
            done = torch.zeros_like(done)
        self.fired = self.fired or bool(done.any())
        return done  # type: ignore[no-any-return]


def stop_criterion(tokenizer: Any, stop: Sequence[str], prompt_len: int,
                   min_tokens: int) -> AfterMinTokens:
    """The stop strings' criterion (transformers' StopStringCriteria over `tokenizer`, a
    PreTrainedTokenizerFast), from token min_tokens + 1 on."""
    return AfterMinTokens(StopStringCriteria(tokenizer, list(stop)), prompt_len, min_tokens)


def cut_text(decode: Any, tokens: Sequence[int], stop: Sequence[str], include: bool,
             stopped: bool) -> str:
    """The request's text: decode(tokens), cut at the stop string the last token completed
    when `stopped`."""
    text = decode(list(tokens))
    if not stopped:
        return text
    before = len(decode(list(tokens[:-1])).rstrip(REPLACEMENT))
    found = []
    for s in stop:
        at = text.find(s, max(0, before - len(s) + 1))
        if at >= 0:
            found.append((at + len(s), -len(s)))
    if not found:  # StopStringCriteria saw a stop string the decode does not hold
        return text
    end, neg_len = min(found)
    return text[:end] if include else text[:end + neg_len]
