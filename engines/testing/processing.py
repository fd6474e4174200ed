"""When a request's logits processing is the identity, so that "processed" logprobs (after
the request's penalties, temperature, filters and constraints: what an engine that declares
`logprobs_of = "processed"` returns) are the raw ones (the model's log_softmax: what our
engines and an engine declaring "raw" return).

The reference engine cannot hand the suite another kind than its own, and processed values
cannot be rebuilt from raw top-N ones in general (a temperature or a penalty renormalizes over
the whole vocabulary). So values of different kinds are compared only where processing changes
nothing. Greedy counts as the identity: engines that return processed logprobs for greedy
requests (vLLM's processed_logprobs, mistral.rs) apply temperature 1 there, not a one-hot.
"""

from __future__ import annotations

from engines.protocol import SamplingParams

__all__ = ["comparable_kinds", "not_identity"]


def not_identity(params: SamplingParams) -> str | None:
    """The first field whose processing changes the distribution the logprobs are of, or
    None where processed and raw logprobs are the same values."""
    p = params
    changes = (
        ("temperature", p.temperature not in (0.0, 1.0)),
        ("repetition_penalty", p.repetition_penalty != 1.0),
        ("frequency_penalty", p.frequency_penalty != 0.0),
        ("presence_penalty", p.presence_penalty != 0.0),
        # min_tokens bans the stop ids until it is reached: only where there are any.
        ("min_tokens", bool(p.min_tokens and p.stop_token_ids)),
        ("top_k", p.top_k > 0),
        ("top_p", p.top_p < 1.0),
        ("min_p", p.min_p > 0.0),
        ("allowed_token_ids", p.allowed_token_ids is not None),
        ("logit_bias", bool(p.logit_bias)),
        ("bad_words", bool(p.bad_words)),
        ("guided", p.guided is not None),
    )
    return next((name for name, changed in changes if changed), None)


def comparable_kinds(mine: str, theirs: str, params: SamplingParams) -> bool:
    """Whether logprobs of kind `mine` and of kind `theirs` (engines.protocol.LOGPROBS_OF)
    for a request with these params are the same values: kinds alike, or processing the
    identity."""
    return mine == theirs or not_identity(params) is None
