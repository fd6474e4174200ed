"""Planted bugs that raise: the example ToyEngine with one method overridden, each raising an
ordinary Python exception under some request mix, as a real engine's index or buffer
arithmetic does. The suite must report each as a finding (call, step, requests in flight, the
engine's frames) with a shrunk script that raises the same exception.

Any check sees a crash: `caught_by` is "crash", and `check` names the check to run it under.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from engines.protocol import Request
from examples.toy_engine import ToyEngine


class PadsToFirstRow(ToyEngine):
    """Decode copies each row's cached keys into a table padded to row 0's context (row 0
    being the oldest, assumed the longest), one slot wider for the token being decoded. A
    younger row holding more context indexes past it: IndexError in step(). Exposed only
    when a row after the first decodes with a longer context than the first's."""

    caught_by = "crash"
    check = "parity"

    def decode(self, slot: int) -> int:
        padded = [0] * (len(self.kv[0]) + 1)
        for i, key in enumerate(self.kv[slot]):
            padded[i] = key
        return super().decode(slot)


class WaitingRingOverflow(ToyEngine):
    """add_request files each waiting request in a ring preallocated for one batch's worth
    (max_batch_size entries: sized for the steady state, not a burst); one more waiting
    request writes past its end: IndexError in add_request(). Exposed only when more
    requests wait at once than the engine has slots."""

    caught_by = "crash"
    check = "liveness"

    def __init__(self, **kw: int) -> None:
        super().__init__(**kw)
        self.ring: list[Hashable | None] = [None] * self.max_batch_size

    def add_request(self, request: Request) -> None:
        self.validate(request)  # bad input is still refused first, as it must be
        self.ring[len(self.waiting)] = request.request_id
        super().add_request(request)


class IdleFastPathOverflow(ToyEngine):
    """A request admitted to an idle engine, alone, takes a fast path (no batching) whose
    prompt buffer holds 16 tokens; a longer prompt overruns it: IndexError in step(). Batches
    never take the path, so a long prompt that arrives while others run is served fine: the
    suite first meets the exception when its alone oracle serves that prompt on its own (a
    Hypothesis draw asks it to), and a shrunk workload of that prompt alone raises it too."""

    caught_by = "crash"
    check = "parity"
    FAST_PATH = 16

    def prefill(self, slot: int) -> int:
        seq = self.slots[slot]
        assert seq is not None
        if self.occupied() == 1 and not self.waiting:
            buffer = [0] * self.FAST_PATH
            for pos, token in enumerate(seq.request.prompt_token_ids):
                buffer[pos] = token
        return super().prefill(slot)


# Any: each class adds `caught_by` and `check`, which ToyEngine itself lacks.
CRASH_PLANTED: list[Any] = [PadsToFirstRow, WaitingRingOverflow, IdleFastPathOverflow]
