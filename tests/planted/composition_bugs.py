"""Planted bugs that only features drawn together expose (issue 51): each needs an n > 1
family that carries stop strings, or one aborted after a child finished; families alone,
stop strings alone and aborts alone pass. The draws compose them
(engines.testing.composition) and the children feature's seed workloads hold both.
PAIRED_PLANTED: a LoRA adapter with constraints, speculation with penalties, each on one
request (the constraints feature's seed workload under adapters; the drafts feature's
penalized prompts whose drafts hit). BeamIgnoresMinTokens: beams with min_tokens (the beams
feature's seed workload, beam_search)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

import engines.paged.engine as paged_engine
from engines.core.beams import BeamSearch
from engines.core.constraints import batch_mask
from engines.core.request_state import RequestState
from engines.loras import zoo_loras
from engines.models import DEFAULT_PRESET
from engines.paged.engine import PagedEngine
from engines.paged.speculate import Speculation
from engines.paged.state import PagedRequest
from engines.protocol import FinishReason, Request, StepOutput
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.zoo import ZOO_ADAPTERS
from tests.planted.sampler import Row


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


class LoraRowsUnconstrained(PagedEngine):
    """The constraint mask is built for the base model's rows only: a row under a LoRA
    adapter samples unmasked (its allowed ids, bad words and bias ignored; a guided row keeps
    its grammar). Constraints on base rows, and adapters without constraints, are right.
    Built with adapters (tests.planted.tenants.with_zoo_loras)."""

    caught_by = "constraints"

    def _step(self) -> list[StepOutput]:
        plain = paged_engine.sample

        def skips_lora_rows(logits: torch.Tensor, seqs: Sequence[RequestState],
                            **kw: Any) -> Any:
            def masks(rows: Sequence[RequestState], vocab: int, device: torch.device
                      ) -> torch.Tensor | None:
                mask = batch_mask(rows, vocab, device)
                for i, seq in enumerate(rows):
                    if mask is not None and seq.request.lora is not None and seq.matcher is None:
                        mask[i] = 0.0
                return mask
            return plain(logits, seqs, masks=masks, **kw)

        paged_engine.sample = skips_lora_rows  # this engine's step only, then put back
        try:
            return super()._step()
        finally:
            paged_engine.sample = plain


class SpeculationSkipsPenalties(PagedEngine):
    """A speculating engine (drafting with the target itself, as tests/planted/spec_bugs.py's
    do) samples the verify step's draft positions (every round after the first) without the
    request's repetition, presence and frequency penalties: an accepted run follows the raw
    logits. Penalties without speculation, and speculation without penalties, are right;
    the reference engine applies the penalties at every position."""

    caught_by = "reference_parity"
    reference = SequentialEngine

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("speculation", Speculation("draft", num_tokens=3, draft_model="tiny"))
        super().__init__(**kw)

    def _round(self, x: torch.Tensor, seqs: list[PagedRequest], rnd: int,
               drafts: Mapping[PagedRequest, Sequence[int]]
               ) -> tuple[list[int], list[Mapping[int, float] | None], list[float | None]]:
        if rnd == 0:
            return super()._round(x, seqs, rnd, drafts)
        rows: list[Any] = [Row(s, dataclasses.replace(
            s.request.params, repetition_penalty=1.0, presence_penalty=0.0,
            frequency_penalty=0.0)) for s in seqs]
        return super()._round(x, rows, rnd, drafts)


def lora_rows_unconstrained_with_loras() -> PagedEngine:
    """LoraRowsUnconstrained serving the zoo's adapters, by a spec a report's script (and
    `--engine`) can name."""
    return LoraRowsUnconstrained(DEFAULT_PRESET, loras=zoo_loras(DEFAULT_PRESET, ZOO_ADAPTERS))


# Features drawn together that each needs its own engine's set-up (adapters, speculation):
# each caught by its check's seed workloads (tests/testing/test_composition.py).
PAIRED_PLANTED: list[Any] = [LoraRowsUnconstrained, SpeculationSkipsPenalties]


class _NoMinTokens(BeamSearch):
    def processed(self, logprobs: torch.Tensor) -> torch.Tensor:
        return logprobs  # planted: the stop ids never held back


class BeamIgnoresMinTokens(PagedEngine):
    """The paged engine's beam search drops the min_tokens mask: a stop id may end a
    hypothesis before min_tokens tokens are out (a beam of the best first token alone, STOP).
    Beams without min_tokens, and min_tokens without beams, are right."""

    caught_by = "beam_search"
    reference = SequentialEngine

    beam_search = _NoMinTokens


class PagedBesideSequential(PagedEngine):
    """The correct paged engine beside the same reference: BeamIgnoresMinTokens' control."""

    reference = SequentialEngine
