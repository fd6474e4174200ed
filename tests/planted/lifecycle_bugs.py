"""Planted bugs that only features drawn together with a lifecycle event expose (issue 51): an
abort that lands while a stop string's start is held back, and a preemption of an n > 1
family. Requests with stop strings that are not aborted, aborts of requests without stop
strings, families that are not preempted and preemptions of single requests all pass. The
seed workloads hold both (the stop-strings feature's "aborted while text is held back", the
children feature's families past a pool); tests/testing/test_composition.py catches each."""

from __future__ import annotations

import dataclasses
from typing import Any

from engines.core.request_state import RequestState
from engines.paged.state import PagedRequest
from engines.protocol import FinishReason, StepOutput
from engines.slot.continuous import ContinuousBatchEngine
from tests.planted.paged_bugs import SmallPool

__all__ = ["LIFECYCLE_PLANTED", "AbortDuringHoldBackEndsStop",
           "PreemptedChildTakesSiblingsTokens"]


class AbortDuringHoldBackEndsStop(ContinuousBatchEngine):
    """An abort that lands while the stream holds text back (a stop string could still begin
    there; or a multi-byte character is cut) finishes the request STOP, as if that stop
    string had completed, and drops the held text; an abort with nothing held back finishes
    ABORT. The seed workload that catches it every run holds stop strings (budget_finish
    meets it too, by chance, on a drawn abort after a cut character)."""

    caught_by = "stop_strings"

    def _take_aborts(self, outputs: list[StepOutput]) -> list[RequestState]:
        start = len(outputs)
        taken = super()._take_aborts(outputs)
        for i in range(start, len(outputs)):
            out = outputs[i]
            if out.finish_reason == FinishReason.ABORT and out.text:
                outputs[i] = dataclasses.replace(out, finish_reason=FinishReason.STOP, text="")
        return taken


class PreemptedChildTakesSiblingsTokens(SmallPool):
    """A preempted child of an n > 1 family is put back in the queue with the tokens of a
    sibling still running (the family's output looked up by request id, not by child): it
    resumes over its sibling's context, and what it samples next follows that. A preempted
    single request, or a family never preempted, is served right."""

    caught_by = "children"

    def _preempt(self, seq: PagedRequest) -> None:
        super()._preempt(seq)
        if seq.family <= 1:
            return
        rid, k = seq.request.request_id, len(seq.output)
        sibling = next((s for s in [*self.running, *self.waiting]
                        if s is not seq and s.request.request_id == rid
                        and len(s.output) >= k and s.output[:k] != seq.output), None)
        if sibling is not None:
            seq.output[:] = sibling.output[:k]


LIFECYCLE_PLANTED: list[Any] = [AbortDuringHoldBackEndsStop, PreemptedChildTakesSiblingsTokens]
