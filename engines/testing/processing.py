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

import dataclasses

from engines.protocol import SamplingParams
from engines.testing.limits import EngineLimits

__all__ = ["GREEDY_FILTERS", "comparable_kinds", "declared_greedy_filters", "greedy_filter",
           "not_identity"]

# Filter values that leave only the most likely token at any temperature: a draw under one of
# them, seed or none, is the greedy token (ties aside). min_p 1 keeps tokens as likely as the
# most likely; top_p 1e-6 keeps the most likely alone (no token's probability is below it
# when it is the largest of fewer than a million).
GREEDY_FILTERS: dict[str, float | int] = {"top_k": 1, "min_p": 1.0, "top_p": 1e-6}


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


def greedy_filter(params: SamplingParams) -> str | None:
    """The filter that makes a sampled request greedy in all but name (GREEDY_FILTERS), where
    it asks for no other processing; else None."""
    if params.temperature <= 0:
        return None
    found = [name for name, value in GREEDY_FILTERS.items() if getattr(params, name) == value]
    if len(found) != 1:
        return None
    plain = dataclasses.replace(params, temperature=1.0, **{found[0]: getattr(
        SamplingParams(), found[0])})
    return found[0] if not_identity(plain) is None else None


def declared_greedy_filters(limits: EngineLimits) -> tuple[str, ...]:
    """The GREEDY_FILTERS every engine compared declares, with temperature (none without)."""
    fields = limits.sampling_fields
    if "temperature" not in fields:
        return ()
    return tuple(name for name in GREEDY_FILTERS if name in fields)


def comparable_kinds(mine: str, theirs: str, params: SamplingParams) -> bool:
    """Whether logprobs of kind `mine` and of kind `theirs` (engines.protocol.LOGPROBS_OF)
    for a request with these params are the same values: kinds alike, or processing the
    identity."""
    return mine == theirs or not_identity(params) is None
