"""Planted bugs in n > 1 (engines.core.children) on the reference ContinuousBatchEngine."""

from __future__ import annotations

from typing import Any

from engines.core.sampling import make_generator
from engines.protocol import Request
from engines.slot.continuous import ContinuousBatchEngine


class ChildrenShareASeed(ContinuousBatchEngine):
    """Every child of a seeded request samples with the request's own seed (vLLM PR #10980,
    llama.cpp PR #18700): n identical samples. Reproducible, so alone and batched agree."""

    caught_by = "children"

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        params = request.params
        if params.temperature > 0 and params.seed is not None:
            for seq in self._live[request.request_id]:
                seq.generator = make_generator(params.seed, self.device)


CHILDREN_PLANTED: list[Any] = [ChildrenShareASeed]
