"""Speculative decoding for the paged engine (`PagedEngine(speculation=Speculation(...))`,
off by default): a drafter (engines.paged.drafters) proposes up to k tokens for a decoding
request, and one batched target forward verifies every row's drafts at once.

A step: the schedule gives every decoding request its one token first, then, from the budget
left and the blocks free (never by preempting), up to k draft tokens each (`_add_drafts`);
prompt chunks follow as usual. The drafter proposes; each speculating row is a span
[last token, d1 .. dc] at positions num_computed .. num_computed + c, whose c + 1 logits all
come back, packed in the same forward as the rows without drafts and the prompt chunks (the
attention treats the span as a chunk: causal over the request's own KV). Then verification
in rounds: round r samples, for every row still going, the token at offset r, through the
engine's own sampler (engines.core.sampling.sample) on the request's own state, with every
token accepted so far already appended: penalties, min_tokens, constraint masks, guided
grammars and logprobs are those of position r exactly as plain decoding has them. The token
is emitted; the row goes on to round r + 1 only if it equals draft d(r+1) and did not finish
the request (a stop id, the budget). So a row emits its accepted drafts and then one token
of the target's own: the correction at the first rejection, or the bonus after all c.

Acceptance, greedy: the draft equals the target's argmax. Sampled (temperature > 0): the
drafts are point masses (both drafters draft greedily), and the target's token at position r
is drawn by the sampler exactly as plain decoding draws it, one exponential-race draw from
the request's own generator per emitted token; the draft is accepted when the draw equals it.
That is the standard speculative-sampling rule for a point-mass q (accept with probability
min(1, p(d)/q(d)) = p(d); otherwise a token from max(0, p - q) normalised, which is p without
d, renormalised: the race's winner given that it is not d), realised with the randomness that
plain decoding would use. Hence a seeded request's tokens are the same as without speculation
(and alone or batched): the drafts change how many tokens a step emits, never which.

With `sampled_drafts` (draft model only) a sampled request's drafts are drawn from the draft
model's processed distribution q, and the round's token at a drafted offset is the textbook
rule's (`_round`, engines.paged.spec_sampling): d accepted with probability min(1, p/q),
else a draw from the normalised residual max(0, p - q), every uniform from the request's own
generator. Its tokens follow p as plain decoding's do, but they are other tokens, and depend
on the drafts each step verified (so on the batch): see speculative_draft_sampled.

After verification a row that emitted m tokens caches num_computed + m tokens (the KV of the
rejected drafts is garbage past that, overwritten later), gives back every block past what
those need (rejected drafts leave no block held), and offers its newly full blocks to the
prefix cache. Preemption and prefix caching work as without speculation; a preempted row's
draft KV is recomputed with its prompt.

Under `compiled="step"` a speculating step goes through the compiled graph like any mixed step
(its rows are spans; the graph computes any span); under "graphs" only decode-only steps are
captured, so speculating steps run eagerly. The draft model's forward is always eager.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from engines.core.sampling import sample, top_logprobs
from engines.paged.drafters import Drafter, DraftModelDrafter, NgramDrafter
from engines.paged.forward import Row
from engines.paged.spec_sampling import inverse_cdf, target_probs, uniform
from engines.paged.state import PagedRequest
from engines.protocol import StepOutput

if TYPE_CHECKING:
    from engines.paged.blocks import BlockPool
    from engines.paged.forward import PagedForward

METHODS = ("ngram", "draft")


@dataclass(frozen=True, slots=True)
class Speculation:
    method: str = "ngram"  # "ngram" (prompt lookup) or "draft" (a draft model)
    num_tokens: int = 3  # k: draft tokens verified per row per step, at most
    ngram_max: int = 3  # prompt lookup: the longest suffix matched (tried first)
    ngram_min: int = 1  # ... and the shortest
    draft_model: str = "tiny-draft"  # a preset or checkpoint sharing the target's vocabulary
    # Draft model only: a sampled request's drafts drawn from the draft's distribution q and
    # verified by the min(1, p/q) rule (engines.paged.spec_sampling); off: greedy drafts.
    sampled_drafts: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"speculation.method: {self.method!r} is not one of {METHODS}")
        if self.num_tokens < 1:
            raise ValueError(f"speculation.num_tokens: must be >= 1, got {self.num_tokens}")
        if self.sampled_drafts and self.method != "draft":
            raise ValueError("speculation.sampled_drafts: needs method 'draft' (a prompt "
                             "lookup's drafts have no distribution)")


def merged(run: Sequence[StepOutput]) -> StepOutput:
    """One StepOutput for the tokens a row emitted in one step (each from `append`)."""
    def cat(parts: Sequence[tuple[Any, ...] | None]) -> tuple[Any, ...] | None:
        return None if parts[0] is None else tuple(x for p in parts for x in p or ())

    if len(run) == 1:
        return run[0]
    return dataclasses.replace(
        run[0], token_ids=tuple(t for o in run for t in o.token_ids),
        finish_reason=run[-1].finish_reason, top_logprobs=cat([o.top_logprobs for o in run]),
        # every token's text delta, not only the first's (streamed_text, stop_strings)
        text=None if all(o.text is None for o in run) else "".join(o.text or "" for o in run),
        logprobs=cat([o.logprobs for o in run]))


class SpeculativeSteps:
    """PagedEngine's speculation, a mixin: the schedule's draft hook and the speculating
    step. Each method one job, so a planted bug overrides one."""

    drafter: Drafter | None
    speculation: Speculation | None
    spec_draft_tokens: int
    spec_accepted_tokens: int
    pool: BlockPool
    runner: PagedForward
    kv_block_size: int
    running: list[PagedRequest]

    def _init_speculation(self, speculation: Speculation | None, **draft: Any) -> None:
        """`draft`: what a draft model's forward needs (DraftModelDrafter's keywords)."""
        self.speculation = speculation
        self.spec_draft_tokens = self.spec_accepted_tokens = 0
        if speculation is None:
            self.drafter = None
        elif speculation.method == "ngram":
            self.drafter = NgramDrafter(speculation.ngram_max, speculation.ngram_min)
        else:
            self.drafter = DraftModelDrafter(speculation.draft_model,
                                             sampled=speculation.sampled_drafts, **draft)

    def _add_drafts(self, decoding: list[PagedRequest], plan: dict[PagedRequest, int],
                    budget: int) -> None:
        """After every decoding row has its token: draft tokens for each, within the budget
        left, the request's budget (c drafts can emit c + 1 tokens) and the free blocks."""
        if self.drafter is None or self.speculation is None:
            return
        bs = self.kv_block_size
        for seq in decoding:
            if plan.get(seq) != 1 or not seq.output or seq.group is not None:  # beams: none
                continue
            left = seq.request.params.max_tokens - len(seq.output) - 1
            k = min(self.speculation.num_tokens, left, budget - sum(plan.values()))
            if k <= 0:
                continue
            room = (len(seq.blocks) + self.pool.num_free()) * bs - seq.num_computed - 1
            c = min(self.drafter.wants(seq, k), room)
            if c <= 0:
                continue
            need = -(-(seq.num_computed + 1 + c) // bs) - len(seq.blocks)
            if need > 0:
                seq.blocks.extend(self.pool.allocate(need))
            plan[seq] = 1 + c

    def _spec_row(self, seq: PagedRequest, drafts: Sequence[int]) -> Row:
        """The verification span: the last token (no KV yet) and the drafts after it, every
        offset's logits wanted."""
        start = seq.num_computed
        return Row((*seq.tokens(start, start + 1), *drafts), start, seq.blocks, True,
                   logits_at=tuple(range(len(drafts) + 1)), seat=seq.seat,
                   lora=seq.lora_slot)

    def _accepts(self, seq: PagedRequest, rnd: int, token: int,
                 drafts: Mapping[PagedRequest, Sequence[int]]) -> bool:
        """Whether seq goes on to the next round: the token it emitted at offset rnd is its
        draft there, and the request did not end at it."""
        own = drafts[seq]
        return not seq.finished and rnd < len(own) and token == own[rnd]

    def _verify(self, ready: list[PagedRequest], ready_logits: torch.Tensor,
                drafts: Mapping[PagedRequest, Sequence[int]],
                spec_logits: Mapping[PagedRequest, torch.Tensor]
                ) -> dict[PagedRequest, list[StepOutput]]:
        """Sample round by round (see the module's docstring); every row's emitted tokens."""
        runs: dict[PagedRequest, list[StepOutput]] = {}
        seqs = [*ready, *drafts]
        x = torch.cat([ready_logits, *(spec_logits[s][:1] for s in drafts)])
        rnd = 0
        while seqs:
            tokens, tops, logprobs = self._round(x, seqs, rnd, drafts)
            going = []
            for seq, token, top, logprob in zip(seqs, tokens, tops, logprobs, strict=True):
                runs.setdefault(seq, []).append(seq.append(token, top, logprob))
                if seq in drafts and self._accepts(seq, rnd, token, drafts):
                    going.append(seq)
            self.spec_accepted_tokens += len(going)
            rnd += 1
            seqs = going
            if going:
                x = torch.stack([spec_logits[s][rnd] for s in going])
        return runs

    def _round(self, x: torch.Tensor, seqs: list[PagedRequest], rnd: int,
               drafts: Mapping[PagedRequest, Sequence[int]]
               ) -> tuple[list[int], list[Mapping[int, float] | None], list[float | None]]:
        """One round's tokens (and raw top logprobs) for the rows `x` holds the logits of:
        the sampler's draw, or for a row with a sampled draft at offset rnd, the min(1, p/q)
        rule (engines.paged.spec_sampling)."""
        assert self.drafter is not None
        probs = self.drafter.probs
        ruled = [i for i, s in enumerate(seqs) if s in probs and rnd < len(drafts[s])]
        if not ruled:
            return sample(x, seqs)
        n = len(seqs)
        tokens = [0] * n
        tops_: list[Mapping[int, float] | None] = [None] * n
        logprobs: list[float | None] = [None] * n
        plain = [i for i in range(n) if i not in set(ruled)]
        if plain:
            got = sample(x[plain], [seqs[i] for i in plain])
            for j, i in enumerate(plain):
                tokens[i], tops_[i], logprobs[i] = got[0][j], got[1][j], got[2][j]
        rows = [seqs[i] for i in ruled]
        p = target_probs(x[ruled], rows)
        for j, (i, seq) in enumerate(zip(ruled, rows, strict=True)):
            tokens[i] = self._speculative_token(seq, p[j], probs[seq][rnd], drafts[seq][rnd])
        ruled_tops, ruled_lps = top_logprobs(x[ruled], rows, [tokens[i] for i in ruled])
        for j, i in enumerate(ruled):
            tops_[i], logprobs[i] = ruled_tops[j], ruled_lps[j]
        return tokens, tops_, logprobs

    def _speculative_token(self, seq: PagedRequest, p: torch.Tensor, q: torch.Tensor,
                           draft: int) -> int:
        """The draft with probability min(1, p(d) / q(d)), else a draw from the residual."""
        if uniform(seq) * float(q[draft]) < float(p[draft]):
            return draft
        return inverse_cdf(self._residual(p, q), uniform(seq))

    def _residual(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """max(0, p - q), normalised; p itself where that is all zero (p == q, where a
        rejection takes a rounding error)."""
        r = torch.clamp(p.double() - q.double(), min=0.0)
        total = float(r.sum())
        return p.double() / float(p.sum()) if total <= 0.0 else r / total

    def _emitted(self, seq: PagedRequest, run: Sequence[StepOutput], drafted: int
                 ) -> StepOutput:
        """What the client gets for the step: every token the row emitted, in one output."""
        return merged(run)

    def _settle(self, seq: PagedRequest, emitted: int) -> None:
        """After verification: KV for every token but the last emitted; the blocks past what
        that needs (rejected drafts') go back to the pool."""
        seq.num_computed += emitted
        keep = -(-seq.num_computed // self.kv_block_size)
        if len(seq.blocks) > keep:
            self.pool.free(seq.blocks[keep:])
            del seq.blocks[keep:]
        seq.draft_computed = min(seq.draft_computed, seq.num_computed)

    def _spec_step(self, outputs: list[StepOutput], plan: dict[PagedRequest, int]
                   ) -> list[StepOutput]:
        """PagedEngine.step with speculation: rows planned beyond their pending token carry
        drafts."""
        engine: Any = self
        assert self.drafter is not None
        drafts = self.drafter.propose({seq: n - seq.num_pending for seq, n in plan.items()
                                       if n > seq.num_pending})
        rows = [self._spec_row(seq, drafts[seq]) if seq in drafts else engine._row(seq, n)
                for seq, n in plan.items()]
        logits = self.runner.forward(rows)
        plain: dict[PagedRequest, int] = {}
        plain_rows, plain_parts, spec_logits = [], [], {}
        at = 0
        for (seq, n), row in zip(plan.items(), rows, strict=True):
            count = len(row.logit_offsets())
            if seq in drafts:
                spec_logits[seq] = logits[at : at + count]
                self.spec_draft_tokens += count - 1
            else:
                plain[seq] = n
                plain_rows.append(row)
                plain_parts.append(logits[at : at + count])
            at += count
        ready_logits = logits[:0]
        if plain_parts:
            ready_logits = engine._take_prompt_logprobs(plain, plain_rows,
                                                        torch.cat(plain_parts))
        ready = engine._advance(plain)
        ready, ready_logits = engine._beam_ready(ready, ready_logits, outputs)  # beam rows
        runs = self._verify(ready, ready_logits, drafts, spec_logits)
        for seq, run in runs.items():
            if seq in drafts:
                self._settle(seq, len(run))
                engine._cache_full_blocks(seq)
                outputs.append(self._emitted(seq, run, len(drafts[seq])))
            else:
                outputs.append(run[0])
            if seq.finished:
                engine._finish(seq)
                engine._retire(seq)
        return outputs
