"""Planted bugs in the reference ContinuousBatchEngine's streamed text and stop strings
(engines.core.detokenize): the incremental detokenizer's classic slips, one override each.
Each is deterministic and as wrong alone as batched, so parity cannot see it: only the text
checks, against the tokenizer's plain decode, can.
"""

from __future__ import annotations

from typing import Any

from engines.core.detokenize import IncrementalText
from engines.protocol import Request
from engines.slot.continuous import ContinuousBatchEngine


class _OwnText(ContinuousBatchEngine):
    """A continuous engine whose requests stream through `detok` (a buggy IncrementalText)."""

    detok: type[IncrementalText] = IncrementalText

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("max_batch_size", 4)
        super().__init__(**kw)

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        seq = self._live[request.request_id][0]
        assert seq.detok is not None
        seq.detok = self.detok(seq.detok._tok, request.params.stop,
                               request.params.include_stop_str_in_output)


class _SearchesNewTokenOnly(IncrementalText):
    def _find_stop(self, before: int) -> None:
        # The bug: only the new token's characters are searched, so a stop string whose
        # first characters came with an earlier token (an earlier step) is never found.
        text = self.visible
        for s in self.stop:
            at = text.find(s, before)
            if at >= 0:
                self.stopped_by = s
                self._cut = at + len(s) if self.include_stop else at
                return


class StopStringAcrossStepsMissed(_OwnText):
    """Stop strings are searched in each token's own text, not across the boundary with the
    text before it (vLLM PR #45636: the stop-string buffer split at token boundaries): one
    that spans two tokens, so two steps, is missed and the request runs on."""

    caught_by = "stop_strings"
    detok = _SearchesNewTokenOnly


class _LagsAfterCut(IncrementalText):
    def add(self, token: int, *, check_stop: bool = True) -> bool:
        waited = bool(self._tail)
        stopped = super().add(token, check_stop=check_stop)
        if waited and not self._tail:
            # The bug: once a cut character completes, the read offset is left one token
            # behind, so the next delta hands out the completing token's text again.
            self._read -= 1
            self._prefix_text = self._decode(self._tokens[self._prefix:self._read])
        return stopped


class MultiByteCharacterTwice(_OwnText):
    """After a multi-byte character cut across tokens completes, the detokenizer's read
    offset lags a token, and the next delta repeats it (SGLang #31598: a CJK character
    duplicated in a stream)."""

    caught_by = "streamed_text"
    detok = _LagsAfterCut


TEXT_PLANTED: list[Any] = [StopStringAcrossStepsMissed, MultiByteCharacterTwice]
