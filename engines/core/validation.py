"""The bad-input checks every engine runs at add_request, before touching any state."""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Hashable

from engines.protocol import BASE_PARAMS, InvalidRequest, Request, SamplingParams

_DEFAULTS = SamplingParams()


def _is_int(value: object) -> bool:
    # bool is an int subclass but never a token id; numpy integers pass through int().
    return not isinstance(value, bool) and hasattr(value, "__index__")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def check_request(
    request: Request, *, vocab_size: int, max_model_len: int, in_flight: Container[Hashable],
    supported: Collection[str] = BASE_PARAMS,
) -> None:
    """Raise InvalidRequest naming the field and value of the first problem found.
    `supported`: the SamplingParams fields the engine honours (its `supported_sampling`); any
    other set away from its default is refused rather than silently ignored."""
    if not isinstance(request, Request):
        raise InvalidRequest(f"request: expected engines.protocol.Request, got {request!r}")
    rid = request.request_id
    try:
        hash(rid)
    except TypeError:
        raise InvalidRequest(f"request_id: {rid!r} is not hashable") from None
    if rid in in_flight:
        raise InvalidRequest(f"request_id: {rid!r} is already in flight")
    prompt = request.prompt_token_ids
    if not isinstance(prompt, tuple | list) or len(prompt) == 0:
        raise InvalidRequest(f"prompt_token_ids: must be a non-empty sequence, got {prompt!r}")
    for i, tok in enumerate(prompt):
        if not _is_int(tok):
            raise InvalidRequest(f"prompt_token_ids[{i}]: {tok!r} is not an integer token id")
        if not 0 <= int(tok) < vocab_size:
            raise InvalidRequest(
                f"prompt_token_ids[{i}]: {tok!r} is outside the vocabulary 0..{vocab_size - 1}"
            )
    p = request.params
    if not _is_int(p.max_tokens) or p.max_tokens < 1:
        raise InvalidRequest(f"max_tokens: must be an integer >= 1, got {p.max_tokens!r}")
    if len(prompt) + p.max_tokens > max_model_len:
        raise InvalidRequest(
            f"max_tokens: prompt length {len(prompt)} + max_tokens {p.max_tokens} exceeds "
            f"max_model_len {max_model_len}"
        )
    for i, tok in enumerate(p.stop_token_ids):
        if not _is_int(tok) or not 0 <= int(tok) < vocab_size:
            raise InvalidRequest(
                f"stop_token_ids[{i}]: {tok!r} is not a token id in the vocabulary"
            )
    if not isinstance(p.temperature, int | float) or not p.temperature >= 0.0:
        raise InvalidRequest(f"temperature: must be a number >= 0, got {p.temperature!r}")
    if p.seed is not None and not _is_int(p.seed):
        raise InvalidRequest(f"seed: must be an integer or None, got {p.seed!r}")
    if not _is_int(p.logprobs) or not 0 <= p.logprobs <= vocab_size:
        raise InvalidRequest(f"logprobs: must be an integer in 0..{vocab_size}, got {p.logprobs!r}")
    _check_processing(p)
    for name in sorted(set(SamplingParams.__dataclass_fields__) - set(supported)):
        value = getattr(p, name)
        if value != getattr(_DEFAULTS, name):
            raise InvalidRequest(f"{name}: {value!r} is not supported by this engine (it "
                                 f"honours {', '.join(sorted(supported))})")


def _check_processing(p: SamplingParams) -> None:
    """The logits-processing fields (engines.protocol.SamplingParams' steps 1-4)."""
    if not _is_int(p.top_k) or p.top_k < -1:
        raise InvalidRequest(f"top_k: must be an integer >= 1, or 0 or -1 for off, got "
                             f"{p.top_k!r}")
    if not _number(p.top_p) or not 0.0 < p.top_p <= 1.0:
        raise InvalidRequest(f"top_p: must be a number in (0, 1], got {p.top_p!r}")
    if not _number(p.min_p) or not 0.0 <= p.min_p <= 1.0:
        raise InvalidRequest(f"min_p: must be a number in [0, 1], got {p.min_p!r}")
    if not _number(p.repetition_penalty) or not p.repetition_penalty > 0.0:
        raise InvalidRequest(f"repetition_penalty: must be a number > 0, got "
                             f"{p.repetition_penalty!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if not _number(value) or not -2.0 <= value <= 2.0:
            raise InvalidRequest(f"{name}: must be a number in [-2, 2], got {value!r}")
    if not _is_int(p.min_tokens) or not 0 <= p.min_tokens <= p.max_tokens:
        raise InvalidRequest(f"min_tokens: must be an integer in 0..max_tokens "
                             f"({p.max_tokens}), got {p.min_tokens!r}")
