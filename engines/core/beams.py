"""Beam search (SamplingParams.beam_width > 1): the search itself, apart from any KV cache.

The rule is transformers' generate(num_beams=W, do_sample=False, early_stopping="never",
length_penalty=lp, num_return_sequences=n, eos_token_id=<the stop ids>, max_new_tokens=
max_tokens) (tests/engines/core/test_beam_search.py runs it as the oracle), stated here so that
an engine needs no transformers to follow it:

- Each step, every running beam's next-token log-softmax (fp32, no processing) is added to
  its cumulative logprob; the K = max(2, 1 + #stop ids) * W best (beam, token) candidates are
  taken, best first (the first step has one beam: the prompt). While fewer than min_tokens
  tokens are generated, a stop id's log-softmax is -inf (generate's min_new_tokens processor,
  applied to the log-softmax without renormalising: the other tokens keep their raw values).
- A candidate that ends its hypothesis (its token is a stop id, or it is the max_tokens-th
  token) is a finished hypothesis if it ranks among the first W, scored cumulative logprob /
  length ** length_penalty (length: its generated tokens, the stop id included); the best W
  finished hypotheses are kept. The first W candidates that do not end are the next beams.
- The search ends when no beam can go on (max_tokens), or when W hypotheses are finished and
  no running beam can still beat the worst of them: the best running beam's cumulative
  logprob / L ** length_penalty is not above it, with L = max_tokens where length_penalty > 0
  (a longer beam's logprob only falls, so that is the best score it can reach) and its
  present length otherwise (generate's early_stopping="never"). generate's default heuristic
  (early_stopping=False) takes the present length always, and so can stop before a longer
  beam overtakes the finished ones; "never" returns the best beams the search can find, as
  CTranslate2's beam search does when its patience is never reached.
- The n best finished hypotheses are the children 0..n-1, best first, each finishing STOP if
  it ends with a stop id, else LENGTH.

Only greedy beams are searched: no sampling, processing (but min_tokens), constraints, logprobs
or stop strings (check_beam_request refuses those rather than ignore them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from engines.protocol import FinishReason, InvalidRequest, SamplingParams

__all__ = ["BeamSearch", "Hypothesis", "check_beam_request"]

_OFF = SamplingParams()
# The fields a beam request may set besides the search's own.
_BEAM_FIELDS = frozenset({"max_tokens", "stop_token_ids", "n", "beam_width", "length_penalty",
                          "min_tokens"})


def check_beam_request(params: SamplingParams) -> None:
    """InvalidRequest for a beam request asking for what the search does not do."""
    if params.beam_width <= 1:
        return
    for f in dataclasses.fields(SamplingParams):
        if f.name not in _BEAM_FIELDS and getattr(params, f.name) != getattr(_OFF, f.name):
            raise InvalidRequest(f"{f.name}: {getattr(params, f.name)!r} is not supported with "
                                 f"beam search (beam_width {params.beam_width}); it takes "
                                 f"{', '.join(sorted(_BEAM_FIELDS))} only")


@dataclass(frozen=True, slots=True)
class Hypothesis:
    tokens: tuple[int, ...]
    logprob: float  # cumulative
    score: float  # logprob / len(tokens) ** length_penalty
    finish_reason: FinishReason


@dataclass(slots=True)
class BeamSearch:
    params: SamplingParams
    # The running beams' generated tokens and cumulative logprobs (fp32), best first.
    beams: list[tuple[int, ...]] = field(default_factory=lambda: [()])
    logprobs: torch.Tensor = field(default_factory=lambda: torch.zeros(1))
    finished: list[Hypothesis] = field(default_factory=list)  # best first, at most W
    done: bool = False

    def advance(self, logprobs: torch.Tensor) -> list[int]:
        """One step: `logprobs` [len(beams), vocab], each running beam's next-token
        log-softmax. Returns, for each new running beam, the row of the beam it extends (a
        cache is reordered by it); [] once the search is done."""
        width, stops = self.params.beam_width, set(self.params.stop_token_ids)
        length = len(self.beams[0]) + 1
        raw = self.processed(logprobs.float())  # min_tokens' mask only
        total = (raw + self.logprobs.to(logprobs.device)[:, None]).flatten()
        k = min(max(2, 1 + len(self.params.stop_token_ids)) * width, total.numel())
        values, ids = torch.topk(total, k)
        vocab = logprobs.shape[-1]
        last = length >= self.params.max_tokens
        scores = self.normalise(values, length)  # fp32, as generate's
        new: list[Hypothesis] = []
        rows: list[int] = []
        beams: list[tuple[int, ...]] = []
        kept: list[float] = []
        for rank, (value, idx, score) in enumerate(zip(values.tolist(), ids.tolist(),
                                                       scores.tolist(), strict=True)):
            row, token = divmod(idx, vocab)
            tokens = (*self.beams[row], token)
            if token in stops or last:
                if rank < width:
                    reason = FinishReason.STOP if token in stops else FinishReason.LENGTH
                    new.append(Hypothesis(tokens, value, score, reason))
            elif len(beams) < width:
                beams.append(tokens)
                rows.append(row)
                kept.append(value)
        # The best W of the old and the new (a stable sort: the old first among equals).
        self.finished = sorted(self.finished + new, key=lambda h: -h.score)[:width]
        if not beams:
            self.done = True
            return []
        self.beams, self.logprobs = beams, torch.tensor(kept, dtype=torch.float32)
        if len(self.finished) >= width:
            reach = self.params.max_tokens if self.params.length_penalty > 0 else length
            best = float(self.normalise(self.logprobs[:1], reach)[0])
            if not best > self.finished[-1].score:
                self.done = True
                return []
        return rows

    def processed(self, logprobs: torch.Tensor) -> torch.Tensor:
        """The step's log-softmax with the stop ids at -inf while fewer than min_tokens
        tokens are generated (the others left raw, as generate's min_new_tokens leaves them)."""
        stops = list(self.params.stop_token_ids)
        if not stops or len(self.beams[0]) >= self.params.min_tokens:
            return logprobs
        out = logprobs.clone()
        out[:, stops] = float("-inf")
        return out

    def normalise(self, logprobs: torch.Tensor, length: int) -> torch.Tensor:
        """Scores of hypotheses of `length` generated tokens with these cumulative logprobs."""
        return logprobs / (length ** self.params.length_penalty)

    def results(self) -> list[Hypothesis]:
        """The n best finished hypotheses, best first."""
        assert self.done, "the search is still running"
        return self.finished[: self.params.n]
