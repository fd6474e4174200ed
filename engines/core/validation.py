"""The bad-input checks every engine runs at add_request, before touching any state."""

from __future__ import annotations

import math
from collections.abc import Collection, Container, Hashable

from engines.protocol import (
    BASE_PARAMS,
    GUIDED_KINDS,
    REQUEST_FIELDS,
    Guided,
    InvalidRequest,
    Request,
    SamplingParams,
)

_DEFAULTS = SamplingParams()
_REQUEST_DEFAULTS = dict.fromkeys(REQUEST_FIELDS)  # lora, cache_salt: off at None


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
    _check_constraints(p, vocab_size)
    _check_outputs(p, vocab_size)
    for name in sorted(REQUEST_FIELDS):
        value = getattr(request, name)
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidRequest(f"{name}: must be a non-empty string or None, got {value!r}")
    unsupported = [(name, getattr(p, name), getattr(_DEFAULTS, name))
                   for name in sorted(set(SamplingParams.__dataclass_fields__) - set(supported))]
    unsupported += [(name, getattr(request, name), _REQUEST_DEFAULTS[name])
                    for name in sorted(REQUEST_FIELDS - set(supported))]
    for name, value, default in unsupported:
        if value != default:
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


def _token_ids(name: str, ids: object, vocab_size: int, *, empty_ok: bool = False) -> None:
    if not isinstance(ids, tuple | list) or (not ids and not empty_ok):
        raise InvalidRequest(f"{name}: must be a non-empty sequence of token ids, got {ids!r}")
    for i, tok in enumerate(ids):
        if not _is_int(tok) or not 0 <= int(tok) < vocab_size:
            raise InvalidRequest(f"{name}[{i}]: {tok!r} is not a token id in the vocabulary "
                                 f"0..{vocab_size - 1}")


def _check_constraints(p: SamplingParams, vocab_size: int) -> None:
    """Wave 4's constraints: allowed ids, logit bias, bad words, guided decoding."""
    if p.allowed_token_ids is not None:
        _token_ids("allowed_token_ids", p.allowed_token_ids, vocab_size)
    if not isinstance(p.logit_bias, tuple | list):
        raise InvalidRequest(f"logit_bias: must be (token id, bias) pairs, got {p.logit_bias!r}")
    biased: set[int] = set()
    for i, pair in enumerate(p.logit_bias):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidRequest(f"logit_bias[{i}]: {pair!r} is not a (token id, bias) pair")
        tok, bias = pair
        if _is_int(tok) and int(tok) in biased:
            # OpenAI's logit_bias is a map: a second bias for one token is ambiguous.
            raise InvalidRequest(f"logit_bias[{i}]: token {tok!r} is biased twice")
        if _is_int(tok):
            biased.add(int(tok))
        if not _is_int(tok) or not 0 <= int(tok) < vocab_size:
            raise InvalidRequest(f"logit_bias[{i}]: token {tok!r} is not in the vocabulary "
                                 f"0..{vocab_size - 1}")
        if not _number(bias) or not -100.0 <= bias <= 100.0:
            raise InvalidRequest(f"logit_bias[{i}]: bias {bias!r} for token {tok} must be a "
                                 "number in [-100, 100]")
    if not isinstance(p.bad_words, tuple | list):
        raise InvalidRequest(f"bad_words: must be a sequence of token sequences, got "
                             f"{p.bad_words!r}")
    for i, word in enumerate(p.bad_words):
        _token_ids(f"bad_words[{i}]", word, vocab_size)
    g = p.guided
    if g is None:
        return
    if not isinstance(g, Guided):
        raise InvalidRequest(f"guided: expected engines.protocol.Guided, got {g!r}")
    if g.kind not in GUIDED_KINDS:
        raise InvalidRequest(f"guided.kind: {g.kind!r} is not one of {', '.join(GUIDED_KINDS)}")
    if g.kind == "choice":
        if (not isinstance(g.spec, tuple) or not g.spec
                or not all(isinstance(c, str) and c for c in g.spec)):
            raise InvalidRequest(f"guided.spec: a choice needs a non-empty tuple of non-empty "
                                 f"strings, got {g.spec!r}")
    elif not isinstance(g.spec, str) or not g.spec:
        raise InvalidRequest(f"guided.spec: a {g.kind} needs a non-empty string, got {g.spec!r}")


def _check_outputs(p: SamplingParams, vocab_size: int) -> None:
    """Wave 4's output surface: n, beam search, prompt logprobs, stop strings."""
    if not _is_int(p.n) or p.n < 1:
        raise InvalidRequest(f"n: must be an integer >= 1, got {p.n!r}")
    if not _is_int(p.beam_width) or p.beam_width < 1:
        raise InvalidRequest(f"beam_width: must be an integer >= 1, got {p.beam_width!r}")
    if p.beam_width > 1 and p.n > p.beam_width:
        raise InvalidRequest(f"n: {p.n} beams asked of a beam search of width {p.beam_width} "
                             "(n must be <= beam_width)")
    if not _number(p.length_penalty):
        raise InvalidRequest(f"length_penalty: must be a finite number, got "
                             f"{p.length_penalty!r}")
    if not _is_int(p.prompt_logprobs) or not 0 <= p.prompt_logprobs <= vocab_size:
        raise InvalidRequest(f"prompt_logprobs: must be an integer in 0..{vocab_size}, got "
                             f"{p.prompt_logprobs!r}")
    if not isinstance(p.stop, tuple | list) or not all(isinstance(s, str) and s for s in p.stop):
        raise InvalidRequest(f"stop: must be a sequence of non-empty strings, got {p.stop!r}")
    if not isinstance(p.include_stop_str_in_output, bool):
        raise InvalidRequest(f"include_stop_str_in_output: must be a bool, got "
                             f"{p.include_stop_str_in_output!r}")
