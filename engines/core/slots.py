"""The SlotIntrospection bookkeeping of the engines with slots: the slot engines
(engines.slot) and the sequential reference, whose one slot is its DynamicCache."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from engines.core.engine import EngineCore
from engines.core.request_state import RequestState
from engines.protocol import Request


class BaseEngine(EngineCore[RequestState]):
    """EngineCore plus SlotIntrospection: `running[i]` occupies slot i."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wasted_slot_steps: int = 0

    def _new_state(self, request: Request, generator: torch.Generator | None) -> RequestState:
        return RequestState(request, generator)

    def slot_table(self) -> list[Hashable | None]:
        table: list[Hashable | None] = [seq.request.request_id for seq in self.running]
        return table + [None] * (self.max_batch_size - len(table))

    def slot_lengths(self) -> list[int]:
        raise NotImplementedError
