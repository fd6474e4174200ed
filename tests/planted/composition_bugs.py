"""Planted bugs that only features drawn together expose (issue 51): each needs an n > 1
family that carries stop strings, or one aborted after a child finished; families alone,
stop strings alone and aborts alone pass. The draws compose them
(engines.testing.composition) and the children feature's seed workloads hold both."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.protocol import FinishReason, Request, StepOutput
from engines.slot.continuous import ContinuousBatchEngine


class ChildStopStringEndsFamily(ContinuousBatchEngine):
    """The user's bug of issue 51: a child that completes a stop string ends its whole
    family, its siblings finishing STOP the next step with what they had (the stop-string
    match is kept per request, not per child). A stop id, or the budget, ends one child only."""

    caught_by = "stop_strings"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ended: set[tuple[Hashable, int]] = set()

    def step(self) -> list[StepOutput]:
        outs = [dataclasses.replace(o, finish_reason=FinishReason.STOP)
                if (o.request_id, o.index) in self._ended and o.finished else o
                for o in super().step()]
        for o in outs:
            siblings = self._live.get(o.request_id, [])
            if o.finish_reason != FinishReason.STOP or not siblings:
                continue
            params = siblings[0].request.params
            if params.stop and not set(o.token_ids) & set(params.stop_token_ids):
                for seq in siblings:  # a stop string matched: the family ends
                    if not seq.abort_pending:
                        seq.abort_pending = True
                        self._aborts += 1
                        self._ended.add((o.request_id, seq.index))
        return outs


class AbortAfterChildFinishedCrashes(ContinuousBatchEngine):
    """The crash of issue 51: abort_request walks a family's children by index 0..n-1 in its
    list of live children, which a finished child has already left: IndexError once one
    child of the aborted family has finished (a family aborted with all its children
    running, or once all finished, is fine)."""

    caught_by = "crash"
    check = "children"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._n: dict[Hashable, int] = {}

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self._n[request.request_id] = request.params.n

    def abort_request(self, request_id: Hashable) -> None:
        family = self._live.get(request_id, []) if isinstance(request_id, Hashable) else []
        if family:
            for i in range(self._n.get(request_id, 1)):
                family[i].abort_pending = True
        super().abort_request(request_id)


class AbortedFamilyLeaksBlocks(PagedEngine):
    """Aborting a family of which a child already finished drops the running siblings'
    blocks without freeing them (the family's blocks are taken to have gone with its first
    finished child): the pool shrinks by them for good."""

    caught_by = "kv_accounting"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._child_done: set[Hashable] = set()

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self._child_done.discard(request.request_id)  # an id used again is a new family

    def _release_blocks(self, seq: PagedRequest) -> None:
        rid = seq.request.request_id
        if (seq.family > 1 and seq.finish_reason == FinishReason.ABORT
                and rid in self._child_done):
            seq.blocks = []  # never freed
            return
        if seq.family > 1 and seq.finish_reason in (FinishReason.STOP, FinishReason.LENGTH):
            self._child_done.add(rid)
        super()._release_blocks(seq)


COMPOSITION_PLANTED: list[Any] = [ChildStopStringEndsFamily, AbortAfterChildFinishedCrashes,
                                  AbortedFamilyLeaksBlocks]
