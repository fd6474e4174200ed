"""The engine contract: what third-party engines implement and what the suite and bench call.

Pure Python (no torch): an engine author can import it without any of our dependencies.
Modelled on the add_request / step / has_work loop of vLLM's LLMEngine.
"""

from __future__ import annotations

import difflib
import itertools
import os
import warnings
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "BASE_PARAMS",
    "CONSTRAINT_PARAMS",
    "DECLARABLE_FIELDS",
    "DECLARATIONS",
    "DTYPES",
    "FIELD_SYNONYMS",
    "GUIDED_KINDS",
    "KV_CACHE_DTYPES",
    "LOGPROBS_OF",
    "OUTPUT_FIELDS",
    "OUTPUT_PARAMS",
    "PROCESSING_PARAMS",
    "REQUEST_FIELDS",
    "TEXT_PARAMS",
    "Abortable",
    "Capabilities",
    "Engine",
    "Exercised",
    "FinishReason",
    "Guided",
    "GuidedKind",
    "IndependentTwin",
    "InvalidRequest",
    "KVIntrospection",
    "LoRAManagement",
    "Load",
    "LoadIntrospection",
    "Request",
    "SamplingParams",
    "SlotIntrospection",
    "StepOutput",
    "capabilities_of",
    "check_declarations",
    "child_key",
    "close",
    "expected_failed_checks",
    "kv_extra_blocks",
    "load_settle_s",
    "logprobs_of",
    "loras",
    "max_concurrency",
    "output_fields",
    "position_thresholds",
    "supported_sampling",
    "tokenizer_of",
    "unknown_name",
]


class InvalidRequest(ValueError):
    """Raised by `add_request` for bad input; the message names the field and the value."""


class FinishReason(str, Enum):
    LENGTH = "length"  # max_tokens generated
    STOP = "stop"  # a token in stop_token_ids was generated (it IS included in the output)
    ABORT = "abort"  # abort_request was called


GuidedKind = Literal["regex", "json_schema", "choice", "grammar"]
GUIDED_KINDS: tuple[GuidedKind, ...] = ("regex", "json_schema", "choice", "grammar")


@dataclass(frozen=True, slots=True)
class Guided:
    """A constraint on a request's output text (guided decoding, vLLM's structured outputs):

    - "regex": `spec` is a regular expression the whole output must match;
    - "json_schema": `spec` is a JSON schema, as a JSON string (hashable, as the params are);
    - "choice": `spec` is a tuple of strings, the output is exactly one of them;
    - "grammar": `spec` is a context-free grammar in GBNF (llama.cpp's EBNF dialect, which
      xgrammar and vLLM's EBNF read too), its root rule `root`.

    Tokens are masked so that the text decoded so far stays a prefix of some match; a request
    whose output is a full match and can go no further stops there (finish STOP), one whose
    budget ends first stops with a valid prefix (LENGTH). Needs a tokenizer: text gives the
    constraint its meaning.
    """

    kind: GuidedKind
    spec: str | tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.spec, list):
            object.__setattr__(self, "spec", tuple(self.spec))


# Deliberately unchecked: engines refuse bad values at add_request (engines.core.validation), and
# the suite must be able to build bad requests to prove that they do.
@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling, with vLLM's semantics where it has one. A token is chosen from
    the model's logits for the request's row, processed in this order:

    1. min_tokens: while fewer than `min_tokens` tokens are generated, the stop ids cannot be
       sampled (their logits are -inf), so no stop id ends the request before it.
    2. repetition_penalty (1.0: off, > 0): every token id in the prompt or the output so far
       has its logit divided by the penalty where positive, multiplied where negative.
    3. frequency_penalty, presence_penalty (0.0: off, in [-2, 2]): over the output so far
       only, the logit of a token generated c times drops by frequency_penalty x c, plus
       presence_penalty once if c > 0.
    4. temperature 0: the argmax (top_k, top_p and min_p then cannot change the choice).
       Otherwise logits / temperature, then min_p (0.0: off, in [0, 1]; keep tokens at
       least min_p x the most likely one's probability), top_k (0 or -1: off; keep the k
       most likely), top_p (1.0: off, in (0, 1]; keep the most likely tokens whose
       probabilities sum to at least top_p), each on what the previous one kept (vLLM's
       order: min_p is a logits processor before its top-k/top-p sampler), and a draw from
       the rest by the request's own RNG (`seed`). top_k: -1 is accepted as vLLM's older
       "off".
    Constraints come first, before step 1, in this order: `guided` (tokens that
    would leave the grammar at -inf), `allowed_token_ids` (every other id at -inf),
    `bad_words` (the last token of every listed sequence whose other tokens the output ends
    with, at -inf; a one-token sequence is always banned), then `logit_bias` (added to the
    raw logit, OpenAI's and vLLM's place: before penalties and temperature).
    Top logprobs (`logprobs` > 0) are of the model's raw distribution, before any of these
    steps, as vLLM returns them by default; an engine that returns processed ones says so
    (Capabilities.logprobs_of).

    Output surface: `n` samples of one prompt (each a child with its own `index` in
    its StepOutputs; a seeded request's children draw from seeds the engine derives, pairwise
    distinct and reproducible); `beam_width` > 1 runs beam search (greedy over beams; the `n`
    best by cumulative logprob / length ** length_penalty are returned as children 0..n-1,
    best first, each finished); `prompt_logprobs` (k > 0: the request's first output carries
    one mapping per prompt position); `stop` strings end the request at the token whose text
    completes the first one (the text is cut before it, or after it with
    `include_stop_str_in_output`), for engines that declare a `tokenizer`.
    """

    max_tokens: int = 16  # >= 1
    stop_token_ids: tuple[int, ...] = ()
    temperature: float = 0.0  # 0.0 = greedy
    seed: int | None = None  # per-request RNG when temperature > 0
    logprobs: int = 0  # top candidates to return per token (0: none)
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0  # <= max_tokens
    # Constraints.
    allowed_token_ids: tuple[int, ...] | None = None  # None: off; else only these may be sampled
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in [-100, 100])
    bad_words: tuple[tuple[int, ...], ...] = ()  # token sequences never completed
    guided: Guided | None = None
    # The output surface.
    n: int = 1  # parallel samples of the prompt (outputs carry their `index`)
    beam_width: int = 1  # > 1: beam search, the n best beams returned
    length_penalty: float = 1.0  # beam scores: cumulative logprob / length ** length_penalty
    prompt_logprobs: int = 0  # top candidates per prompt position (0: none)
    stop: tuple[str, ...] = ()  # stop strings (engines that declare a tokenizer)
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        # Lists (and dicts, for logit_bias) are accepted and frozen, so params stay hashable.
        for name in ("stop_token_ids", "allowed_token_ids", "stop"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if isinstance(self.logit_bias, dict):
            object.__setattr__(self, "logit_bias", tuple(sorted(self.logit_bias.items())))
        elif isinstance(self.logit_bias, list):
            object.__setattr__(self, "logit_bias", tuple(tuple(p) for p in self.logit_bias))
        if isinstance(self.bad_words, list):
            object.__setattr__(self, "bad_words", tuple(tuple(w) for w in self.bad_words))


# Names of the SamplingParams and Request fields, by meaning, for Capabilities.supported_sampling
# (which holds any of them; DECLARABLE_FIELDS is every one).
# The fields an engine honours unless it declares otherwise: what the protocol began with.
BASE_PARAMS = frozenset({"max_tokens", "stop_token_ids", "temperature", "seed", "logprobs"})
# The logits processing that shapes each token's choice (SamplingParams' steps 1-4).
PROCESSING_PARAMS = frozenset({"top_k", "top_p", "min_p", "repetition_penalty",
                               "presence_penalty", "frequency_penalty", "min_tokens"})
# Constraints on what may be chosen (applied before the processing).
CONSTRAINT_PARAMS = frozenset({"allowed_token_ids", "logit_bias", "bad_words", "guided"})
# What a request gets back beyond one token stream: children, beams, prompt logprobs, and the
# stop strings (TEXT_PARAMS, the ones that need a tokenizer).
OUTPUT_PARAMS = frozenset({"n", "beam_width", "length_penalty", "prompt_logprobs", "stop",
                           "include_stop_str_in_output"})
TEXT_PARAMS = frozenset({"stop", "include_stop_str_in_output"})
# Request fields beside its params: an engine that serves LoRA adapters declares "lora", one
# that honours cache salts "cache_salt".
REQUEST_FIELDS = frozenset({"lora", "cache_salt"})
# The field by its name, for code that must not spell a check's name (the prompt_logprobs
# check is named after it; tests/test_layout.py keeps check names in the registry).
PROMPT_LOGPROBS_FIELD = "prompt_logprobs"
# Likewise top logprobs' field (the logprobs check's name): a base field an engine may refuse.
LOGPROBS_FIELD = "logprobs"
# The optional StepOutput fields an engine may declare it fills (Capabilities.output_fields):
# the others (prompt_logprobs, text) follow from what it declares already.
OUTPUT_FIELDS = frozenset({"cached_prompt_tokens"})
# What an engine's top logprobs are of (Capabilities.logprobs_of).
LOGPROBS_OF = ("raw", "processed")
# Every name Capabilities.supported_sampling may hold: each SamplingParams field, and
# REQUEST_FIELDS.
DECLARABLE_FIELDS = frozenset(SamplingParams.__dataclass_fields__) | REQUEST_FIELDS
# Names written for declarable fields -> the fields that declare what they name: the suite's
# feature names (engines/testing/features; tests/testing/test_untestable.py holds every one to
# this table or to a field) and other libraries' names. A misspelt declaration's error names
# these fields: by letters alone (difflib), "stop_strings" is nearest "stop_token_ids".
_STOP_STRINGS = ("stop", "include_stop_str_in_output")
FIELD_SYNONYMS: Mapping[str, tuple[str, ...]] = {
    "stop_strings": _STOP_STRINGS, "stop_string": _STOP_STRINGS,
    "stop_sequences": _STOP_STRINGS, "stop_words": _STOP_STRINGS,
    "children": ("n",), "num_return_sequences": ("n",), "best_of": ("n",),
    "beams": ("beam_width",), "beam_search": ("beam_width",), "num_beams": ("beam_width",),
    "top_logprobs": ("logprobs",),
    "constraints": tuple(sorted(CONSTRAINT_PARAMS)),
    "guided_decoding": ("guided",), "grammar": ("guided",), "response_format": ("guided",),
    "tenants": ("lora", "cache_salt"), "lora_request": ("lora",), "lora_name": ("lora",),
    "greedy_filters": ("temperature", "top_k", "min_p", "top_p"),
    "unseeded_draws": ("temperature",), "sequence_draws": ("temperature",),
    "low_temperature": ("temperature",),
    "seed_groups": ("seed", "temperature"),
    "max_new_tokens": ("max_tokens",), "repeat_penalty": ("repetition_penalty",),
}


def child_key(request_id: Hashable, index: int) -> tuple[Hashable, int]:
    """The key KVIntrospection lists child `index` of a request with n > 1 under."""
    return (request_id, index)


_auto_ids = itertools.count()


def _next_request_id() -> int:
    return next(_auto_ids)


@dataclass(frozen=True, slots=True)
class Request:
    prompt_token_ids: tuple[int, ...]  # non-empty
    params: SamplingParams = SamplingParams()
    request_id: Hashable = field(default_factory=_next_request_id)  # unique per process
    # A LoRA adapter the engine knows by this name (None: the base model), and a
    # cache salt (requests with different salts never share cached KV; None is a salt too).
    lora: str | None = None
    cache_salt: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.prompt_token_ids, list):
            object.__setattr__(self, "prompt_token_ids", tuple(self.prompt_token_ids))


@dataclass(frozen=True, slots=True)
class StepOutput:
    request_id: Hashable
    token_ids: tuple[int, ...]  # tokens produced for this request in this step
    finish_reason: FinishReason | None = None
    # One mapping per token when params.logprobs > 0: top candidate id -> logprob.
    top_logprobs: tuple[Mapping[int, float], ...] | None = None
    # One per token when params.logprobs > 0: the sampled token's logprob (of the same
    # distribution as top_logprobs), whether or not it is among the top candidates.
    logprobs: tuple[float, ...] | None = None
    # The child this output belongs to (0..n-1 for n > 1 or beam search, else 0): a
    # request's children each have their own token stream and their own finishing output,
    # and the request is finished when every child is.
    index: int = 0
    # On a request's first output, when params.prompt_logprobs > 0: one entry per prompt
    # position, None at position 0, else a mapping holding the prompt token's logprob and the
    # k most likely ids' (raw, given the prompt before it).
    prompt_logprobs: tuple[Mapping[int, float] | None, ...] | None = None
    # The detokenized text these tokens add (engines that declare a tokenizer): the deltas of
    # a child concatenated equal the decode of its tokens (cut at a stop string), never half
    # a multi-byte character.
    text: str | None = None
    # The prompt tokens this request's prefill took from the engine's prefix cache (KV
    # computed earlier, not computed again), counted when the request was first admitted (a
    # request preempted and resumed is not counted again): on one output of the request, any
    # one, once (a request with children: once for all of them). None: not reported (on its
    # other outputs, and everywhere on an engine that does not declare it in `output_fields`).
    cached_prompt_tokens: int | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@runtime_checkable
class Engine(Protocol):
    vocab_size: int  # valid token ids are 0 .. vocab_size-1
    max_model_len: int  # prompt + max_tokens may not exceed it

    def add_request(self, request: Request) -> None: ...

    def step(self) -> list[StepOutput]: ...

    def has_work(self) -> bool: ...  # true while any added request is unfinished


@runtime_checkable
class Abortable(Protocol):
    # Unknown or finished id: no-op. The request's last output (finish_reason ABORT, possibly
    # no tokens) comes from a later step(), and its slot is freed like any finished request's.
    def abort_request(self, request_id: Hashable) -> None: ...


@runtime_checkable
class LoRAManagement(Protocol):
    """Optional: LoRA adapters added and removed while the engine runs (vLLM's add_lora).
    `add_lora` makes `name` servable from the next add_request; `remove_lora` of a name in use
    by an unfinished request raises ValueError (the request keeps its adapter); an unknown
    name raises KeyError. A name removed and added again may name other weights."""

    def add_lora(self, name: str, path: str) -> None: ...

    def remove_lora(self, name: str) -> None: ...


@runtime_checkable
class IndependentTwin(Protocol):
    """Optional, for a reference engine: a zero-argument factory of an engine over the same
    weights, dtype, context and adapters whose processing after the logits shares no code
    with this one's (engines.independent for engines.sequential), or None where there is
    none. Given as `--reference-engine`, such an engine judges plain requests and the suite
    sends every request that uses a feature the twin declares to the twin
    (engines.testing.routing); both must give raw top logprobs of the same kind."""

    def independent_twin(self) -> Callable[[], Engine] | None: ...


@runtime_checkable
class SlotIntrospection(Protocol):
    max_batch_size: int
    wasted_slot_steps: int  # slot-steps computed for already-finished requests

    def slot_table(self) -> Sequence[Hashable | None]: ...  # slot index -> occupant or None

    def slot_lengths(self) -> Sequence[int]: ...  # tokens whose KV is cached, per slot


@runtime_checkable
class KVIntrospection(Protocol):
    """Optional, for engines with a block (paged) KV pool; enables the KV-accounting checks.

    Block ids are the engine's own, distinct per physical block. Logical block j of a request
    holds its tokens j*kv_block_size .. (j+1)*kv_block_size - 1 (prompt, then generated).
    A block may sit in several requests' tables only as a shared prefix block: full, at the
    same index j in each, over the same tokens. A request holds exactly the blocks its cached
    tokens need, ceil(cached / kv_block_size): no fewer (its KV must be somewhere) and no more
    (a block with none of its tokens cached is pool memory taken from others), unless the
    engine declares `kv_extra_blocks` (Capabilities).

    Each child of a request with n > 1 is listed under `child_key(request_id, index)`
    (its own table and cached tokens). The children of one request may also share a partially
    filled block copy-on-write (the prompt's last block, after a prefill done once): at the
    same index j in each, holding the same tokens at every position any of them has cached.
    """

    kv_block_size: int  # tokens per block
    kv_total_blocks: int  # blocks requests can hold (reserved blocks excluded)

    def kv_free_blocks(self) -> int: ...  # blocks no request holds: free or evictable cached

    def kv_block_tables(self) -> Mapping[Hashable, Sequence[int]]: ...  # request -> block ids

    def kv_cached_tokens(self) -> Mapping[Hashable, int]: ...  # request -> tokens with KV


@runtime_checkable
class Exercised(Protocol):
    """Optional: counters of what the engine's features did, so that a passing run can say
    how much it exercised them. Cumulative since the engine was built; the suite reports the
    change over each workload. Suggested names: `preemptions`, `chunked_prompts` (prompts
    prefilled over more than one step), `prefix_cache_hit_tokens`; for speculative decoding
    `spec_draft_tokens` (draft tokens proposed for verification) and `spec_accepted_tokens`
    (of those, accepted). A counter the engine cannot give is absent, never zero."""

    def exercised(self) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True)
class Load:
    """An engine's own count of its load at one moment (a server's, from its metrics).

    kv_usage is the fraction (0..1) of the KV pool that requests hold; cache kept only for
    reuse and evictable (a prefix cache, a slot's prompt kept under llama-server's
    cache_prompt) counts as free, as KVIntrospection counts it. None: not reported.
    """

    running: int  # requests being computed
    waiting: int  # requests accepted and queued, not running yet
    kv_usage: float | None = None
    source: str = ""  # where it was read, for messages (e.g. "http://127.0.0.1:8000/metrics")


@runtime_checkable
class LoadIntrospection(Protocol):
    """Optional, for engines the suite cannot look inside (servers over HTTP): their own
    count of what they run. Enables the `drain` check: once has_work() is False, the engine
    reports nothing running or waiting and kv_usage back to what it was before the workload,
    within Capabilities.load_settle_s seconds (a server updates its metrics on its own clock).

    The counts are the whole engine's: a server that other clients use at the same time
    cannot be judged this way (the check would blame it for their requests).
    """

    def load(self) -> Load: ...


# ---------------------------------------------------------------------------------------------
# What an engine supports: one frozen Capabilities, returned by an optional `capabilities()`
# method and read through capabilities_of(engine) only (tests/test_layout.py holds the repo to
# it), so that a bad value is refused in one place, by name, and every reader agrees on the
# defaults. What changes while the engine runs stays on the engine and has its reader below:
# `loras` (LoRAManagement adds and removes adapters) and `close`.

# Weights / compute dtypes an engine may declare (`Capabilities.dtype`; float64 for a reference
# computed wider; int8 / int4 for quantized weights, CTranslate2's int8 compute type and
# onnxruntime-genai's int4 model: the coarsest format its logits pass through), and KV-cache
# dtypes (`Capabilities.kv_cache_dtype`): the same, or a quantized cache as the libraries name
# it (OpenVINO's u8, llama.cpp's q8_0 / q4_0, vLLM's fp8 and its two formats).
# Libraries' short spellings (f64, f32, fp32, bf16, f16, fp16, half, i8) are read as them.
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float64", "int8", "int4")
KV_CACHE_DTYPES: tuple[str, ...] = (*DTYPES, "fp8", "fp8_e4m3", "fp8_e5m2", "u8", "q8_0",
                                    "q4_0")
_DTYPE_SPELLINGS = {"f64": "float64", "f32": "float32", "fp32": "float32", "bf16": "bfloat16",
                    "f16": "float16", "fp16": "float16", "half": "float16", "i8": "int8"}


def _suggest(value: str, names: Collection[str]) -> str:
    close = difflib.get_close_matches(value, sorted(names), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(what: str, value: object, names: Collection[str]) -> str:
    """The sentence for a declaration naming something that does not exist: `what` (e.g.
    "expected_failed_checks: check"), the name, the nearest real one, and all of them."""
    return (f"{what} {value!r} does not exist{_suggest(str(value), names)}; expected one of "
            f"{', '.join(sorted(names))}")


def _field_names(attr: str, declared: object, known: Collection[str]) -> frozenset[str]:
    """`declared` as a set of names, each one of `known` (ValueError naming any other: a
    misspelt name would otherwise declare nothing, silently)."""
    if isinstance(declared, str) or not isinstance(declared, Iterable):
        raise ValueError(f"{attr}: {declared!r} is not a set of field names")
    fields = frozenset(declared)
    for name in sorted(fields, key=str):
        if name not in known:
            meant = [f for f in FIELD_SYNONYMS.get(str(name), ()) if f in known]
            if meant:
                raise ValueError(f"{attr}: field {name!r} does not exist; the fields that "
                                 f"declare it: {', '.join(map(repr, meant))}")
            raise ValueError(unknown_name(f"{attr}: field", name, known))
    return fields


def _count(name: str, value: object, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: {value!r}; expected an int of at least {least}")
    return value


def _dtype(name: str, value: object, known: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: {value!r} is not a dtype name; expected one of "
                         f"{', '.join(known)}")
    value = _DTYPE_SPELLINGS.get(value.lower(), value)
    if value not in known:
        raise ValueError(unknown_name(f"{name}:", value, known))
    return value


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine supports and how it computes: returned by its optional `capabilities()`
    (an engine without one supports the base protocol: every field at its default). Each
    value is checked here; a ValueError names the field and the value. The suite reads it
    through capabilities_of(engine), each time it needs it: an engine whose answer changes
    while it runs (kv_extra_blocks while a fork is in flight) returns the current one.

    - supported_sampling: the SamplingParams fields and Request fields (REQUEST_FIELDS) it
      honours, a set of names (max_tokens always). A field it does not declare is never sent
      to it at anything but its default.
    - output_fields: the optional StepOutput fields it fills (OUTPUT_FIELDS).
    - expected_failed_checks: the suite's checks it knowingly breaks, check name -> reason
      (each name is checked against the suite's registry when a run starts).
    - logprobs_of: what its top logprobs are of, one of LOGPROBS_OF.
    - max_concurrency: requests it runs at once, where it has no SlotIntrospection.
    - position_thresholds: positions past which its model computes differently, by name
      ({"sliding window": 4096}); the suite draws requests that cross each one.
    - kv_extra_blocks: blocks a request may hold beyond its cached tokens' (KVIntrospection).
    - load_settle_s: seconds its load report may lag its streams (LoadIntrospection).
    - tokenizer: a directory holding the tokenizer.json of its vocabulary (text, stop
      strings, grammars), what vLLM's --tokenizer takes; None: no text features.
    - dtype: its weights' and compute dtype, one of DTYPES.
    - kv_cache_dtype: its KV cache's, one of KV_CACHE_DTYPES; None: as dtype (kv_dtype).
    - batch_invariant: every row computes the same bits whatever else is in the batch (its
      reductions in a fixed order), so that batched and alone runs agree exactly at any dtype.
    - min_temperature: the lowest temperature it samples at: a request asking for less (and
      more than 0) is served at this one (vLLM raises temperatures below 0.01 to 0.01, with a
      warning). 0: every temperature asked for is served.
    - refused_with_beams: declared fields it refuses on a beam search (beam_width > 1), with
      InvalidRequest naming the field (its library's beam search ignores them); the suite
      draws no beam request that sets them.
    """

    supported_sampling: frozenset[str] = BASE_PARAMS
    output_fields: frozenset[str] = frozenset()
    expected_failed_checks: Mapping[str, str] = field(default_factory=dict)
    logprobs_of: str = "raw"
    max_concurrency: int | None = None
    position_thresholds: Mapping[str, int] = field(default_factory=dict)
    kv_extra_blocks: int = 0
    load_settle_s: float = 0.0
    tokenizer: str | None = None  # a path-like is read as its str
    dtype: str = "float32"
    kv_cache_dtype: str | None = None
    batch_invariant: bool = False
    min_temperature: float = 0.0
    refused_with_beams: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("supported_sampling", _field_names("supported_sampling", self.supported_sampling,
                                               DECLARABLE_FIELDS) | {"max_tokens"})
        put("output_fields", _field_names("output_fields", self.output_fields, OUTPUT_FIELDS))
        failed = self.expected_failed_checks
        if not isinstance(failed, Mapping):
            raise ValueError(f"expected_failed_checks: {failed!r} is not a mapping of check "
                             "names to reasons")
        for name, reason in failed.items():
            if not isinstance(name, str) or not isinstance(reason, str):
                raise ValueError(f"expected_failed_checks: {name!r}: {reason!r}; expected a "
                                 "check name and the reason it fails, both strings")
        put("expected_failed_checks", MappingProxyType(dict(failed)))
        if self.logprobs_of not in LOGPROBS_OF:
            raise ValueError(f"logprobs_of: {self.logprobs_of!r}; expected one of "
                             f"{', '.join(LOGPROBS_OF)}")
        if self.max_concurrency is not None:
            _count("max_concurrency", self.max_concurrency, least=1)
        thresholds = self.position_thresholds
        if not isinstance(thresholds, Mapping):
            raise ValueError(f"position_thresholds: {thresholds!r} is not a mapping of names "
                             "to token positions")
        for name, value in thresholds.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"position_thresholds: {name!r} is {value!r}; expected a "
                                 "positive int (a token position)")
        put("position_thresholds", MappingProxyType({str(n): v for n, v in thresholds.items()}))
        _count("kv_extra_blocks", self.kv_extra_blocks, least=0)
        settle = self.load_settle_s
        if isinstance(settle, bool) or not isinstance(settle, int | float) or settle < 0:
            raise ValueError(f"load_settle_s: {settle!r}; expected seconds, at least 0")
        put("load_settle_s", float(settle))
        if self.tokenizer is not None:
            if not isinstance(self.tokenizer, str | os.PathLike):
                raise ValueError(f"tokenizer: {self.tokenizer!r} is not a path (a directory "
                                 "holding tokenizer.json)")
            put("tokenizer", os.fspath(self.tokenizer))
        put("dtype", _dtype("dtype", self.dtype, DTYPES))
        if self.kv_cache_dtype is not None:
            put("kv_cache_dtype", _dtype("kv_cache_dtype", self.kv_cache_dtype,
                                         KV_CACHE_DTYPES))
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(f"batch_invariant: {self.batch_invariant!r}; expected True or "
                             "False")
        floor = self.min_temperature
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor < 2:
            raise ValueError(f"min_temperature: {floor!r}; expected a temperature from 0 up "
                             "to 2 (0: none)")
        put("min_temperature", float(floor))
        put("refused_with_beams", _field_names("refused_with_beams", self.refused_with_beams,
                                               DECLARABLE_FIELDS))

    @property
    def kv_dtype(self) -> str:
        """The KV cache's dtype: kv_cache_dtype, else dtype."""
        return self.kv_cache_dtype or self.dtype


# Each Capabilities field, in words (docs/usage.md's table of declarations is held to it).
DECLARATIONS: Mapping[str, str] = {
    "supported_sampling": "the SamplingParams and Request fields it honours (a set of names)",
    "output_fields": "the optional StepOutput fields it fills (a set of names, OUTPUT_FIELDS)",
    "expected_failed_checks": "the suite's checks it knowingly breaks: check name -> reason",
    "logprobs_of": "what its top logprobs are of, one of LOGPROBS_OF (default raw)",
    "max_concurrency": "requests it runs at once, where it has no SlotIntrospection",
    "position_thresholds": "positions past which its model computes differently, by name",
    "kv_extra_blocks": "blocks a request may hold beyond its cached tokens' (KVIntrospection)",
    "load_settle_s": "seconds its load report may lag its streams (LoadIntrospection)",
    "tokenizer": "a directory holding the tokenizer.json of its vocabulary (text, stop strings)",
    "dtype": "its weights' and compute dtype, one of DTYPES (default float32)",
    "kv_cache_dtype": "its KV cache's dtype, one of KV_CACHE_DTYPES (None: as dtype)",
    "batch_invariant": "every row computes the same bits whatever the batch (default False)",
    "min_temperature": "the lowest temperature it samples at; lower ones are served at it "
                       "(default 0: none)",
    "refused_with_beams": "declared fields it refuses on a beam search, naming the field "
                          "(none drawn on beams)",
}
# The Capabilities fields an engine without `capabilities()` may still declare as plain
# attributes of the same names, for one release (capabilities_of warns): all but the
# precision, which was never an attribute (a `dtype` attribute may be a library's own).
_ATTRIBUTE_DECLARATIONS = ("supported_sampling", "output_fields", "expected_failed_checks",
                           "logprobs_of", "max_concurrency", "position_thresholds",
                           "kv_extra_blocks", "load_settle_s", "tokenizer")
_warned: set[type] = set()


def capabilities_of(engine: object) -> Capabilities:
    """What `engine` supports: its `capabilities()`, else (deprecated, for one release) its
    plain attributes of the Capabilities fields' names, read with a DeprecationWarning once per
    class, else the defaults. A ValueError names a bad value."""
    method = getattr(engine, "capabilities", None)
    if method is not None:
        if not callable(method):
            raise ValueError(f"capabilities: {method!r} is not a method")
        found = method()
        if not isinstance(found, Capabilities):
            raise ValueError(f"capabilities(): returned {found!r}; expected an "
                             "engines.protocol.Capabilities")
        return found
    declared = {}
    for name in _ATTRIBUTE_DECLARATIONS:
        value = getattr(engine, name, None)
        # As the attributes were read: an empty mapping, or None, declares nothing.
        if value is None or (name in ("expected_failed_checks", "position_thresholds")
                             and not value):
            continue
        declared[name] = value
    if declared and type(engine) not in _warned:
        _warned.add(type(engine))
        kind = type(engine)
        fields = ", ".join(f"{n}=..." for n in declared)
        warnings.warn(
            f"{kind.__module__}.{kind.__qualname__} declares {', '.join(declared)} as plain "
            "attributes, which the next release no longer reads: declare them in a method "
            "instead, `def capabilities(self) -> engines.protocol.Capabilities: return "
            f"Capabilities({fields})`", DeprecationWarning, stacklevel=2)
    return Capabilities(**declared)  # type: ignore[arg-type]


def close(engine: object) -> Callable[[], object] | None:
    """The engine's `close()` (it releases the threads, processes or memory the engine holds:
    a worker thread, a server's streams), or None where it has none. The suite calls it on
    every engine it is done with; an engine whose thread refers to it is otherwise never
    freed. A `close` that is not callable is refused (ValueError)."""
    declared = getattr(engine, "close", None)
    if declared is None:
        return None
    if not callable(declared):
        raise ValueError(f"close: {declared!r} is not a method")
    return declared


def loras(engine: object) -> dict[str, str]:
    """The LoRA adapters the engine says it serves now (`loras`, adapter name -> its PEFT
    directory, which a reference engine loads too), none where it says nothing. Read at each
    call: an engine with LoRAManagement changes it."""
    declared = getattr(engine, "loras", None)
    if not declared:
        return {}
    if not isinstance(declared, Mapping):
        raise ValueError(f"loras: {declared!r} is not a mapping of adapter names to paths")
    out = {}
    for name, path in declared.items():
        if not isinstance(name, str) or not name or not isinstance(path, str | os.PathLike):
            raise ValueError(f"loras: {name!r}: {path!r}; expected an adapter name and the "
                             "path of its directory")
        out[name] = os.fspath(path)
    return out


def check_declarations(engine: object) -> None:
    """Read everything the engine declares: a ValueError names the first bad value."""
    capabilities_of(engine)
    loras(engine)
    close(engine)


# The readers of each declaration before Capabilities, kept one release for third parties:
# each warns and reads capabilities_of(engine).<field>.
def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"engines.protocol.{old}(engine) is deprecated: use {new}",
                  DeprecationWarning, stacklevel=3)


def supported_sampling(engine: object) -> frozenset[str]:
    """Deprecated: capabilities_of(engine).supported_sampling."""
    _deprecated("supported_sampling", "capabilities_of(engine).supported_sampling")
    return frozenset(capabilities_of(engine).supported_sampling)


def output_fields(engine: object) -> frozenset[str]:
    """Deprecated: capabilities_of(engine).output_fields."""
    _deprecated("output_fields", "capabilities_of(engine).output_fields")
    return frozenset(capabilities_of(engine).output_fields)


def expected_failed_checks(engine: object) -> dict[str, str]:
    """Deprecated: capabilities_of(engine).expected_failed_checks."""
    _deprecated("expected_failed_checks", "capabilities_of(engine).expected_failed_checks")
    return dict(capabilities_of(engine).expected_failed_checks)


def logprobs_of(engine: object) -> str:
    """Deprecated: capabilities_of(engine).logprobs_of."""
    _deprecated("logprobs_of", "capabilities_of(engine).logprobs_of")
    return capabilities_of(engine).logprobs_of


def max_concurrency(engine: object) -> int | None:
    """Deprecated: capabilities_of(engine).max_concurrency."""
    _deprecated("max_concurrency", "capabilities_of(engine).max_concurrency")
    return capabilities_of(engine).max_concurrency


def position_thresholds(engine: object) -> dict[str, int]:
    """Deprecated: capabilities_of(engine).position_thresholds."""
    _deprecated("position_thresholds", "capabilities_of(engine).position_thresholds")
    return dict(capabilities_of(engine).position_thresholds)


def kv_extra_blocks(engine: object) -> int:
    """Deprecated: capabilities_of(engine).kv_extra_blocks."""
    _deprecated("kv_extra_blocks", "capabilities_of(engine).kv_extra_blocks")
    return capabilities_of(engine).kv_extra_blocks


def load_settle_s(engine: object) -> float:
    """Deprecated: capabilities_of(engine).load_settle_s."""
    _deprecated("load_settle_s", "capabilities_of(engine).load_settle_s")
    return capabilities_of(engine).load_settle_s


def tokenizer_of(engine: object) -> str | None:
    """Deprecated: capabilities_of(engine).tokenizer."""
    _deprecated("tokenizer_of", "capabilities_of(engine).tokenizer")
    found = capabilities_of(engine).tokenizer
    return None if found is None else os.fspath(found)


# Names that moved or went, with what to use instead: importing one says so.
_MOVED = {
    "ALL_PARAMS": "BASE_PARAMS | PROCESSING_PARAMS (its meaning: the token-choice fields)",
    "WAVE4_FIELDS": "CONSTRAINT_PARAMS | OUTPUT_PARAMS | REQUEST_FIELDS",
    "compute_threads": "engines.bench.declarations.compute_threads (a bench-only declaration)",
    "execution": "engines.bench.declarations.execution (a bench-only declaration)",
    "arrival_times": "engines.bench.declarations.arrival_times (a bench-only declaration)",
    "step_by": "engines.bench.declarations.step_by (a bench-only declaration)",
    "ArrivalTimes": "engines.bench.declarations.ArrivalTimes",
    "StepBy": "engines.bench.declarations.StepBy",
}


def __getattr__(name: str) -> object:
    if name == "ALL_PARAMS":
        warnings.warn("engines.protocol.ALL_PARAMS is deprecated: use " + _MOVED[name],
                      DeprecationWarning, stacklevel=2)
        return BASE_PARAMS | PROCESSING_PARAMS
    if name == "WAVE4_FIELDS":
        warnings.warn("engines.protocol.WAVE4_FIELDS is deprecated: use " + _MOVED[name],
                      DeprecationWarning, stacklevel=2)
        return CONSTRAINT_PARAMS | OUTPUT_PARAMS | REQUEST_FIELDS
    if name in _MOVED:
        raise AttributeError(f"engines.protocol.{name} moved: use {_MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
