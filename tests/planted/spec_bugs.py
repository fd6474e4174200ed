"""Planted bugs in the paged engine's speculative decoding (engines.paged.speculate): a
speculating PagedEngine with one method overridden each, each a mistake the trackers report
of speculating engines (issue 32): the bonus token lost, acceptance judged on another row's
draft, rejected drafts' KV left held, a stop id inside an accepted run ignored, the verified
span placed one position off; and, with sampled drafts (the min(1, p/q) rule), the residual
not normalised.

Every bug needs drafts accepted, and the tiny preset's own continuations are hard to draft
(the n-gram drafter's drafts are accepted about 2% of the time over the suite's draws, the
tiny-draft model's about 4%). So the planted engines draft with the target itself
(`Speculation("draft", draft_model="tiny")`, the `speculative_self` variant): every greedy
draft is accepted and a sampled one with the target's own probability, which puts accepted
runs in every workload. `caught_by` names the suite check meant to catch each;
that check's tests (tests/testing/checks/test_<check>.py) run them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engines.paged.engine import PagedEngine
from engines.paged.forward import Row
from engines.paged.spec_sampling import inverse_cdf, uniform
from engines.paged.speculate import Speculation, merged
from engines.paged.state import PagedRequest
from engines.paged.variants import speculative_draft_sampled
from engines.protocol import StepOutput
from engines.sequential import SequentialEngine

__all__ = ["SPEC_DISTRIBUTION", "SPEC_PLANTED", "SPEC_SEARCHED", "AcceptsOnAnotherRowsDraft",
           "AcceptsWithProbabilityP",
           "DropsBonusToken",
           "IgnoresStopInRun", "KeepsRejectedDraftBlocks", "ResidualNotNormalised",
           "SampledDraftsControl", "SpeculatingControl", "VerifiesOneEarly"]

SELF_DRAFT = Speculation("draft", num_tokens=3, draft_model="tiny")
# Sampled drafts from tiny-draft: q differs from p, so sampled drafts are rejected often.
SAMPLED_DRAFTS = Speculation("draft", num_tokens=3, sampled_drafts=True)


class _Speculating(PagedEngine):
    def __init__(self, **kw: Any) -> None:
        kw.setdefault("speculation", SELF_DRAFT)
        super().__init__(**kw)


class SpeculatingControl(_Speculating):
    """Correct: the configuration the bugs are planted in, for the no-false-alarm runs."""

    reference = SequentialEngine


class DropsBonusToken(_Speculating):
    """A row whose every draft was accepted loses the bonus token from its output."""

    # The engine keeps it (its KV and the next draft follow it): the client gets fewer
    # tokens than the request's budget, and a hole in its stream.
    caught_by = "budget_finish"

    def _emitted(self, seq: PagedRequest, run: Sequence[StepOutput], drafted: int
                 ) -> StepOutput:
        if drafted and len(run) == drafted + 1 and not seq.finished:
            run = run[:-1]
        return merged(run)


class AcceptsOnAnotherRowsDraft(_Speculating):
    """Acceptance compares a row's target token with the next speculating row's draft."""

    # Where the other row's draft is this row's target token and its own is not, the row
    # goes on past a token its own draft did not have, with logits computed after its own
    # draft. The suite's search found it with the n-gram drafter after ~400 s (with the
    # self-draft, greedy rows' own drafts are always right); tests/testing/checks/
    # test_reference_parity.py plants that case with scripted drafts.
    caught_by = "reference_parity"
    reference = SequentialEngine

    def _accepts(self, seq: PagedRequest, rnd: int, token: int,
                 drafts: Mapping[PagedRequest, Sequence[int]]) -> bool:
        rows = list(drafts)
        other = drafts[rows[(rows.index(seq) + 1) % len(rows)]]
        return not seq.finished and rnd < len(other) and token == other[rnd]


class KeepsRejectedDraftBlocks(_Speculating):
    """Rejected drafts' blocks stay in the request's table (their KV left in place)."""

    # The tokens are right (the next step overwrites the KV): only the pool's accounting
    # shows a request holding blocks its cached tokens do not need.
    caught_by = "kv_accounting"

    def _settle(self, seq: PagedRequest, emitted: int) -> None:
        seq.num_computed += emitted
        seq.draft_computed = min(seq.draft_computed, seq.num_computed)


class IgnoresStopInRun(_Speculating):
    """An accepted draft that is a stop id does not end the row's run."""

    # The request is marked finished at the stop, but the run's later tokens are emitted.
    caught_by = "budget_finish"

    def _accepts(self, seq: PagedRequest, rnd: int, token: int,
                 drafts: Mapping[PagedRequest, Sequence[int]]) -> bool:
        own = drafts[seq]
        # Only a stop id is ignored: a run going on past a stop string or the budget would
        # trip the engine's own detokenizer first, a crash rather than this bug's symptom.
        ended = seq.finished and token not in seq.request.params.stop_token_ids
        return not ended and rnd < len(own) and token == own[rnd]


class VerifiesOneEarly(_Speculating):
    """The verified span starts one position early: the last token lands on its
    predecessor's position."""

    # Its KV overwrites the previous token's and every draft's position is off by one. Alone
    # it is just as wrong (the drafts are the same): only a reference engine sees it.
    caught_by = "reference_parity"
    reference = SequentialEngine

    def _spec_row(self, seq: PagedRequest, drafts: Sequence[int]) -> Row:
        row = super()._spec_row(seq, drafts)
        return Row(row.tokens, row.start - 1, row.blocks, True, logits_at=row.logits_at,
                   seat=row.seat, lora=row.lora)


class SampledDraftsControl(PagedEngine):
    """Correct: speculative_draft_sampled's configuration (tiny-draft's sampled drafts, the
    min(1, p/q) rule), for the no-false-alarm runs of the distribution check."""

    reference = SequentialEngine
    CAPABILITIES = type(speculative_draft_sampled()).CAPABILITIES  # its declared `seeds`

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("speculation", SAMPLED_DRAFTS)
        super().__init__(**kw)


class ResidualNotNormalised(SampledDraftsControl):
    """A rejected sampled draft is replaced by an inverse-CDF draw from max(0, p - q) as it
    is, not normalised: a uniform past its total mass (1 - the acceptance probability) falls
    to the last token of positive residual."""

    # Greedy rows never reach it and seeded ones are declared broken: only the tokens'
    # distribution shows it, from the second token on.
    caught_by = "sequence_distribution"

    def _residual(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        return torch.clamp(p.double() - q.double(), min=0.0)


class AcceptsWithProbabilityP(SampledDraftsControl):
    """A sampled draft d is accepted with probability p(d), not min(1, p(d) / q(d)): the
    rule's one property, that the emitted token follows p, is lost (a token is then drawn
    with probability q(x) p(x) + (1 - sum q p) r(x), r the normalised residual)."""

    # Greedy rows never reach it and seeded ones are declared broken: only the sampled
    # tokens' distribution shows it. Caught in one run of two at the default profile before
    # the sequence check's power was sized for it (issue 52).
    caught_by = "sequence_distribution"

    def _speculative_token(self, seq: PagedRequest, p: torch.Tensor, q: torch.Tensor,
                           draft: int) -> int:
        if uniform(seq) < float(p[draft]):  # planted: p(d), not min(1, p(d) / q(d))
            return draft
        return inverse_cdf(self._residual(p, q), uniform(seq))


SPEC_PLANTED: list[Any] = [DropsBonusToken, AcceptsOnAnotherRowsDraft,
                           KeepsRejectedDraftBlocks, IgnoresStopInRun, VerifiesOneEarly]
# Caught by a statistical check judged on its seed workload only (no search):
# tests/testing/checks/test_sequence_distribution.py runs it, seeded so that the verdict is
# reproducible.
SPEC_DISTRIBUTION: list[Any] = [ResidualNotNormalised, AcceptsWithProbabilityP]
# Those the suite's search finds in a few drawn workloads (the catalog's report runs them);
# AcceptsOnAnotherRowsDraft is caught by a probe that scripts the drafts.
SPEC_SEARCHED: list[Any] = [b for b in SPEC_PLANTED if b is not AcceptsOnAnotherRowsDraft]
