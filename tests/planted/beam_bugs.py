"""Planted bugs in beam search: the search's rule (engines.core.beams) on the reference
SequentialEngine, and the paged engine's beam groups (engines.paged.beams)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from engines.core.beams import BeamSearch
from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.sequential import SequentialEngine


class _RawScores(BeamSearch):
    def normalise(self, logprobs: torch.Tensor, length: int) -> torch.Tensor:
        return logprobs  # the cumulative logprob, whatever the length


class BeamScoresNotLengthNormalised(SequentialEngine):
    """Finished beams are ranked (and the search stopped) by their cumulative logprob, not
    divided by length ** length_penalty: shorter beams win. Deterministic, so alone and
    batched agree; the reference engine's beams differ where beams end at different lengths
    and the normalisation decides."""

    caught_by = "beam_search"
    reference = SequentialEngine  # the suite harness compares with it

    beam_search = _RawScores


class _StopsGoOn(BeamSearch):
    def advance(self, logprobs: torch.Tensor) -> list[int]:
        params = self.params
        self.params = dataclasses.replace(params, stop_token_ids=())  # planted
        try:
            return super().advance(logprobs)
        finally:
            self.params = params


class PagedBeamStopDoesNotFinish(PagedEngine):
    """A candidate whose token is a stop id goes on as a running beam instead of ending its
    hypothesis: the search runs to max_tokens, and a beam holding a stop id before its end,
    or ending on one with LENGTH, comes back. Caught in one run of two at the default profile
    before the beams feature had a seed workload whose stop ids come from the search's own
    best beam (issue 52)."""

    caught_by = "beam_search"
    reference = SequentialEngine

    beam_search = _StopsGoOn


class PagedBeamKeepsOldTable(PagedEngine):
    """A beam row that the search re-parents onto another beam takes the new beam's tokens
    but keeps its own old block table: its next token is computed over the KV of the beam
    it used to be (vLLM #31081's kind, beam index arithmetic, in the cache). The search goes
    on over wrong logits wherever a beam changes parent."""

    caught_by = "beam_search"
    reference = SequentialEngine

    def _table_of(self, row: PagedRequest | None, parent: PagedRequest) -> PagedRequest:
        return parent if row is None else row


class PagedBeamWritesSharedBlock(PagedEngine):
    """Beam rows skip copy-on-write: a row writes its next token's KV into the partially
    filled block it shares with the other beams of its search (after the prompt, or after a
    re-parenting), so every beam then reads the last writer's KV at that position. (Without
    prefix caching: with it, the shared block would also be offered to the cache twice,
    which the pool asserts against: a crash, not the silent wrong beams planted here.)"""

    caught_by = "beam_search"
    reference = SequentialEngine

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("enable_prefix_caching", False)
        super().__init__(**kw)

    def _private_tail(self, seq: PagedRequest) -> int:
        return 0 if seq.group is not None else super()._private_tail(seq)


class PagedBeamLeaksOldTables(PagedEngine):
    """Re-parenting takes one reference too many on the rows' old tables: the blocks of
    every beam the search left behind are never freed (their counts never reach zero). The
    beams are right, and a pool large enough never notices; the pool's accounting does."""

    caught_by = "kv_accounting"
    reference = SequentialEngine

    def _reparent(self, group: Any, parents: list[int]) -> None:
        for row in group.rows:
            self.pool.hold(row.blocks)
        super()._reparent(group, parents)


BEAM_PLANTED: list[Any] = [BeamScoresNotLengthNormalised, PagedBeamKeepsOldTable,
                           PagedBeamWritesSharedBlock, PagedBeamLeaksOldTables,
                           PagedBeamStopDoesNotFinish]
