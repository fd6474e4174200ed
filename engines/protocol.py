"""The engine contract: what third-party engines implement and what the suite and bench call.

Pure Python (no torch): an engine author can import it without any of our dependencies.
Modelled on the add_request / step / has_work loop of vLLM's LLMEngine.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

__all__ = [
    "ALL_PARAMS",
    "BASE_PARAMS",
    "LOGPROBS_OF",
    "Abortable",
    "Engine",
    "Exercised",
    "FinishReason",
    "InvalidRequest",
    "KVIntrospection",
    "Load",
    "LoadIntrospection",
    "Request",
    "SamplingParams",
    "SlotIntrospection",
    "StepOutput",
    "supported_sampling",
]


class InvalidRequest(ValueError):
    """Raised by `add_request` for bad input; the message names the field and the value."""


class FinishReason(str, Enum):
    LENGTH = "length"  # max_tokens generated
    STOP = "stop"  # a token in stop_token_ids was generated (it IS included in the output)
    ABORT = "abort"  # abort_request was called


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
       Otherwise logits / temperature, then top_k (0 or -1: off; keep the k most likely),
       top_p (1.0: off, in (0, 1]; keep the most likely tokens whose probabilities sum to at
       least top_p), min_p (0.0: off, in [0, 1]; keep tokens at least min_p x the most likely
       one's probability), each on what the previous one kept, and a draw from the rest by
       the request's own RNG (`seed`). top_k: -1 is accepted as vLLM's older "off".
    Top logprobs (`logprobs` > 0) are of the model's raw distribution, before any of these
    steps, as vLLM returns them by default; an engine that returns processed ones says so
    (LOGPROBS_OF).
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

    def __post_init__(self) -> None:
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))


# The fields an engine honours unless it declares otherwise (`supported_sampling`, a set of
# SamplingParams field names, on the engine): what the protocol had before the rest.
BASE_PARAMS = frozenset({"max_tokens", "stop_token_ids", "temperature", "seed", "logprobs"})
ALL_PARAMS = frozenset(SamplingParams.__dataclass_fields__)
# What an engine's top logprobs are of (`logprobs_of` on the engine; "raw" unless declared).
LOGPROBS_OF = ("raw", "processed")


def supported_sampling(engine: object) -> frozenset[str]:
    """The SamplingParams fields `engine` declares it honours (BASE_PARAMS if it says none).
    A field an engine does not declare is never sent to it at anything but its default."""
    declared = getattr(engine, "supported_sampling", None)
    return BASE_PARAMS if declared is None else frozenset(declared) | {"max_tokens"}


_auto_ids = itertools.count()


def _next_request_id() -> int:
    return next(_auto_ids)


@dataclass(frozen=True, slots=True)
class Request:
    prompt_token_ids: tuple[int, ...]  # non-empty
    params: SamplingParams = SamplingParams()
    request_id: Hashable = field(default_factory=_next_request_id)  # unique per process

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
    same index j in each, over the same tokens.
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
    prefilled over more than one step), `prefix_cache_hit_tokens`. A counter the engine
    cannot give is absent, never zero."""

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
    within load_settle_s seconds (a server updates its metrics on its own clock).

    The counts are the whole engine's: a server that other clients use at the same time
    cannot be judged this way (the check would blame it for their requests).
    """

    load_settle_s: float  # how long after the drain the report may lag

    def load(self) -> Load: ...
