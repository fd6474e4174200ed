"""Config variants with planted differences, for the reports of the `variants` check: one that
differs on some requests only (long prompts), and one whose engines differ only now and then
(every other engine built), as a failure that depends on timing does. The main engine is the
toy engine, which is right."""

from __future__ import annotations

import itertools
from typing import Any

from examples.toy_engine import ToyEngine

LONG = 6  # prompts this long or longer are the ones LongPromptsShifted gets wrong


class LongPromptsShifted(ToyEngine):
    """A variant that samples the next id over on requests with a long prompt: the rest of a
    workload matches the main engine's tokens."""

    def sample(self, slot: int) -> int:
        token = super().sample(slot)
        seq = self.slots[slot]
        if seq is not None and len(seq.request.prompt_token_ids) >= LONG:
            return (token + 1) % self.vocab_size
        return token


_built = itertools.count()


class EveryOtherBuild(ToyEngine):
    """Every other engine built samples the next id over, on every request: a replay on fresh
    engines reproduces about half the time (the first one built, the suite's, is wrong)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.wrong = next(_built) % 2 == 0

    def sample(self, slot: int) -> int:
        token = super().sample(slot)
        return (token + 1) % self.vocab_size if self.wrong else token
