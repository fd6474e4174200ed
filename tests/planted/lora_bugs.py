"""Planted LoRA and tenant bugs in the paged engine (built with `loras=`): PEFT's scaling
applied twice, a base row given an adapter's delta, an adapter index kept per seat, rows
given adapters in the order their requests were admitted, a prefix key blind to an adapter
re-added under its name with other weights, a prefix key that ignores the adapter or the
salt, tenants' blocks never shared (isolation by caching nothing), a removed adapter's slot
reused with its weights.

Each names the suite check that catches it (`caught_by`; its check's tests under
tests/testing/checks/ run it on the engine built with the zoo's adapters);
tests/engines/paged/test_lora_planted.py catches each with a hand-written probe as well, but
RowsTakeAdmissionOrder and KeyIgnoresReload, which the tenants feature's seed workloads catch.
"""

from __future__ import annotations

import hashlib

import torch

from engines.core.lora import LoraWeights
from engines.paged import PagedEngine
from engines.paged.blocks import BlockKey
from engines.paged.forward import Row
from engines.paged.lora import LoraStacks
from engines.paged.state import PagedRequest
from engines.protocol import Request

__all__ = ["LORA_PLANTED", "BaseRowsGetADelta", "KeyIgnoresAdapter", "KeyIgnoresReload",
           "RowsTakeAdmissionOrder",
           "SaltIgnored", "ScalingTwice", "SlotReused", "StaleIndex", "TenantsNeverCached"]


class _TwiceScaled(LoraStacks):
    def scaled_b(self, weights: LoraWeights, b: torch.Tensor) -> torch.Tensor:
        return b * weights.scaling * weights.scaling  # planted: PEFT's scaling applied twice


class _StaleSlot(LoraStacks):
    def load(self, weights: LoraWeights) -> int:
        reused = self.free[0] in getattr(self, "used", set())
        if not reused:
            return super().load(weights)
        return self.free.pop(0)  # planted: a reused slot keeps the removed adapter's weights

    def unload(self, slot: int) -> None:
        self.used = getattr(self, "used", set()) | {slot}
        self.free.append(slot)  # (and not zeroed)
        self.free.sort()


class ScalingTwice(PagedEngine):
    caught_by = "reference_parity"

    def _lora_stacks(self, device: torch.device, dtype: torch.dtype) -> LoraStacks:
        return _TwiceScaled(self.runner.lora_shapes(), max_loras=self.max_loras,
                            max_rank=self.max_lora_rank, device=device, dtype=dtype)


class SlotReused(PagedEngine):
    caught_by = "stateful"  # the state machine's swap_adapter rule (removes one, adds another)

    def _lora_stacks(self, device: torch.device, dtype: torch.dtype) -> LoraStacks:
        return _StaleSlot(self.runner.lora_shapes(), max_loras=self.max_loras,
                          max_rank=self.max_lora_rank, device=device, dtype=dtype)


class BaseRowsGetADelta(PagedEngine):
    caught_by = "parity"

    def _row(self, seq: PagedRequest, n: int) -> Row:
        row = super()._row(seq, n)
        # planted: a base row in a batch with adapters takes the first adapter's slot
        others = [s.lora_slot for s in self.running if s.lora_slot]
        return row if row.lora or not others else Row(row.tokens, row.start, row.blocks,
                                                      row.wants_logits, seat=row.seat,
                                                      lora=others[0])


class StaleIndex(PagedEngine):
    caught_by = "parity"

    def _row(self, seq: PagedRequest, n: int) -> Row:
        # planted: the adapter index kept per seat, set when the seat is first taken and not
        # refreshed when another request takes it over
        seats: dict[int, int] = self.__dict__.setdefault("_seat_lora", {})
        row = super()._row(seq, n)
        slot = seats.setdefault(seq.seat, seq.lora_slot)
        return Row(row.tokens, row.start, row.blocks, row.wants_logits, seat=row.seat, lora=slot)


class RowsTakeAdmissionOrder(PagedEngine):
    caught_by = "parity"

    def _schedule(self) -> dict[PagedRequest, int]:
        plan = super()._schedule()
        self.__dict__["_step_rows"] = list(plan)
        return plan

    def _row(self, seq: PagedRequest, n: int) -> Row:
        row = super()._row(seq, n)
        # planted: the step's rows take their adapters in the order their requests were
        # admitted, not each from its own request: right while the rows are in that order,
        # wrong once the scheduler puts a later-admitted request's row first (a short prompt
        # before a long one still being prefilled): docs/findings.md report 37's class
        rows: list[PagedRequest] = self.__dict__.get("_step_rows", [])
        admitted = [s for s in self.running if s in rows]
        i = rows.index(seq) if seq in rows else -1
        lora = admitted[i].lora_slot if 0 <= i < len(admitted) else row.lora
        return Row(row.tokens, row.start, row.blocks, row.wants_logits,
                   logits_at=row.logits_at, seat=row.seat, lora=lora)


class KeyIgnoresAdapter(PagedEngine):
    caught_by = "isolation"

    def _key_root(self, request: Request) -> BlockKey | None:
        return super()._key_root(Request(request.prompt_token_ids, request.params,
                                         request.request_id, None, request.cache_salt))


class KeyIgnoresReload(PagedEngine):
    caught_by = "parity"

    def _key_root(self, request: Request) -> BlockKey | None:
        # planted: the prefix key names the adapter but not which load of it: an adapter
        # re-added under the same name with other weights hits the blocks computed under its
        # old ones (vLLM #47724's class)
        if request.lora is None and request.cache_salt is None:
            return None
        digest = hashlib.blake2b(b"prefix-root", digest_size=32)
        for part in (request.lora, request.cache_salt):
            digest.update(repr(part).encode() + b"\0")
        return digest.digest()


class SaltIgnored(PagedEngine):
    caught_by = "isolation"

    def _key_root(self, request: Request) -> BlockKey | None:
        return super()._key_root(Request(request.prompt_token_ids, request.params,
                                         request.request_id, request.lora, None))


class TenantsNeverCached(PagedEngine):
    caught_by = "isolation"

    def _key_root(self, request: Request) -> BlockKey | None:
        root = super()._key_root(request)
        # planted: isolation by caching nothing: a request under an adapter or a salt keys its
        # blocks under its own id, so no other request, its own tenant's included, shares them
        return root if root is None else root + repr(request.request_id).encode()


LORA_PLANTED: list[type[PagedEngine]] = [ScalingTwice, BaseRowsGetADelta, StaleIndex,
                                         RowsTakeAdmissionOrder, KeyIgnoresReload,
                                         KeyIgnoresAdapter, SaltIgnored, TenantsNeverCached,
                                         SlotReused]
