"""The standard speculative-sampling rule with a sampled draft (`Speculation(sampled_drafts=
True)`, engines.paged.speculate): for a request at temperature > 0 the draft model draws each
draft d from q, its own distribution processed by the request's temperature and filters
(min_p, top_k, top_p), and the target accepts d with probability min(1, p(d) / q(d)), where
p is the distribution plain decoding samples from at that position (the request's constraint
mask, penalties, min_tokens, temperature and filters applied, engines.core.sampling); on a
rejection the token is drawn from the residual max(0, p - q), normalised. Whatever q is, the
emitted token then follows p exactly (Leviathan et al. 2023, Chen et al. 2023), so q may leave
out what only p applies (penalties, masks): a draft p forbids is never accepted, and the
residual is zero wherever p is.

Every draw (the draft's, the acceptance's uniform, the residual's) is a uniform from the
request's own generator, turned into a token by inverse CDF: a seeded request is reproducible
run to run. Its tokens are not plain decoding's (which draws by an exponential race), and
they depend on how many drafts each step verified, so on the batch: an engine configured so
declares the seeded checks broken (engines.paged.variants.speculative_draft_sampled), and
the suite judges its sampled tokens by their distribution (the `sequence_distribution`
check) instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engines.core.request_state import RequestState
from engines.core.sampling import additive_mask, filter_rows, penalize

__all__ = ["draft_probs", "inverse_cdf", "target_probs", "uniform"]


def uniform(seq: RequestState) -> float:
    """One uniform in [0, 1) from the request's own generator."""
    return float(torch.rand((), generator=seq.generator).item())


def inverse_cdf(probs: torch.Tensor, u: float) -> int:
    """The token whose cumulative probability first exceeds u; probs ([vocab], summing to 1)
    must be normalised: a u past the last cumulative value (rounding, or a sum short of 1)
    falls to the last token of positive probability."""
    cdf = torch.cumsum(probs.double(), dim=0)
    token = int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype), right=True)[0])
    last = int(torch.nonzero(probs > 0).max())
    return min(token, last)


def draft_probs(logits: torch.Tensor, seqs: Sequence[RequestState]) -> torch.Tensor:
    """q: the draft model's logits ([n, vocab]) under each request's temperature and
    filters, as probabilities (rows of requests at temperature > 0 only)."""
    x = filter_rows(logits.float(), [s.request.params for s in seqs])
    return torch.softmax(x, dim=-1)


def target_probs(logits: torch.Tensor, seqs: Sequence[RequestState]) -> torch.Tensor:
    """p: what engines.core.sampling.sample draws from for these rows (temperature > 0) in
    their current state: mask, penalties (min_tokens included), temperature, filters."""
    params = [s.request.params for s in seqs]
    mask = additive_mask(seqs, logits.shape[-1], logits.device)
    x = logits.float().clone() if mask is None else logits.float() + mask
    # penalize leaves a row whose penalties are neutral bit for bit as it was.
    x = penalize(x, params, [s.request.prompt_token_ids for s in seqs],
                 [s.output for s in seqs])
    return torch.softmax(filter_rows(x, params), dim=-1)
