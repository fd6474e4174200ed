"""mistral.rs (`mistralrs` 0.9.5, the CPU wheel) behind the engine protocol.

One `mistralrs.Runner` per engine, over the preset written as a directory it loads
(engines.adapters.mistralrs.convert: the legacy config fields, a byte-level word-level
tokenizer whose token i is " t{i}", a chat template that passes the prompt through), in F32
on the CPU, with its KV cache in F32 too (MISTRALRS_CPU_KV_F32=1; its CPU default is f16).
The library schedules and batches on its own threads (continuous batching up to `max_seqs`
sequences, a sequence-level prefix cache of `prefix_cache_n` entries).

The lockstep pattern: its Python API takes one request at a time and streams chunks back.
So each request is a streamed ChatCompletionRequest whose one message is the prompt's text,
consumed by a thread of its own into one Inbox (engines.adapters.common.inbox); `step()`
waits until at least one event is queued, then takes what is queued. A step is what the
library produced meanwhile: tokens are returned when they exist, so the bench's TTFT and ITL
are the library's own.

Translations (where the library's semantics differ from the protocol):
- prompts: the text of the ids (convert.encode); each is tokenized back by the library's own
  tokenizer before it is sent and refused (InvalidRequest naming `prompt_token_ids`) unless
  that gives exactly the requested ids.
- outputs: the library streams text, not ids; every chunk's text is words of the vocabulary
  (convert.token_of), and with logprobs each chunk carries its token's top candidates by id.
- stop ids: mapped adapter-side (its stop sequences are strings, and the model has no EOS):
  the first stop id generated ends the request with STOP (kept in the output); the stream is
  dropped and whatever the library produced after it is discarded.
- abort: the request's thread stops reading and drops the stream; the adapter emits ABORT.
- sampling: temperature (0: greedy), top_k (0 or -1: off), top_p, repetition, presence and
  frequency penalties map to the request's fields of the same names; min_p is refused by
  name (report 27: min_p = 1.0 did not keep the most likely token). With the
  prefix cache on (prefix_cache_n > 0) repetition_penalty is refused by name: after a cache
  hit the penalty leaves out the reused prompt tokens for the first sampled token, so a
  request's tokens depend on what ran before it (docs/findings.md report 25, reproduced on
  the library alone by docs/findings/r25_mistralrs_prefix_cache_penalty.py). A
  per-request seed has no field (the Runner's `seed` is engine-wide, and fails on the CPU:
  docs/findings.md report 26), so seeded requests are refused by name, and `seeds` is
  declared failing; min_tokens has no field either and is refused by name.
- logprobs: the chunk's top_logprobs (by id), of the processed distribution (after its
  penalties; declared, logprobs_of = "processed", so the logprobs check compares them with a
  raw reference only where processing is the identity); without penalties they are the
  model's raw ones. With the
  library's CPU default KV cache (f16, even for an F32 model) they were up to 1.1e-2 off
  the model's and greedy tokens flipped at near-ties; with MISTRALRS_CPU_KV_F32=1 (set here)
  within 1e-5.
- sliding-window models are refused when the engine is made (report 24: the batch panics in
  its KV cache, and the engine is lost).

Not exposed by the library, so absent here (never faked): slot tables, KV blocks and counts
of what its scheduler did (no SlotIntrospection, KVIntrospection or `exercised()`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Read by the library when a Runner builds its KV cache: F32, not its CPU default of f16, so
# that the cached keys and values are the model's (set before the module is imported).
# mistralrs 0.9.5 reads it once a process, when the first Runner is built: every later one
# keeps that Runner's KV dtype whatever the variable says then (measured: an f16 engine built
# first made a later "F32" one f16 too). So an engine asked for the library's f16 cache unsets
# it before the process's first Runner, and an engine asking for the other dtype after that is
# refused (_claim_kv_dtype) rather than declaring a cache it does not have.
KV_F32 = "MISTRALRS_CPU_KV_F32"
os.environ.setdefault(KV_F32, "1")
# The KV-cache dtypes a CPU Runner can have (Capabilities.kv_cache_dtype).
KV_CACHE_DTYPES = ("float32", "float16")
_KV_LOCK = threading.Lock()
_process_kv: list[str] = []  # the KV dtype the process's first Runner fixed, once built

import mistralrs  # noqa: E402

from engines.adapters.common.book import Live, RequestBook  # noqa: E402
from engines.adapters.common.inbox import Inbox  # noqa: E402
from engines.adapters.mistralrs.convert import encode, mistralrs_dir, token_of  # noqa: E402
from engines.models import DEFAULT_PRESET, DEFAULT_SEED, preset_max_model_len  # noqa: E402
from engines.protocol import (  # noqa: E402
    Capabilities,
    FinishReason,
    InvalidRequest,
    Request,
    StepOutput,
)

__all__ = ["SEEDS_LIMIT", "SLIDING_WINDOW_PANICS", "SUPPORTED_SAMPLING",
           "MistralRsEngine", "make_engine", "mistralrs_engine"]

# min_p is refused by name: mistral.rs 0.9.5 sampled past min_p = 1.0, which keeps only the
# most likely token (docs/findings.md report 27).
SUPPORTED_SAMPLING = frozenset({"max_tokens", "stop_token_ids", "temperature", "top_k", "top_p",
                                "repetition_penalty", "presence_penalty",
                                "frequency_penalty", "logprobs"})
SEEDS_LIMIT = ("mistral.rs has no per-request seed (its Runner's seed is engine-wide, and "
               "Runner(seed=) fails on the CPU: docs/findings.md report 26); seeded requests "
               "are refused")
SLIDING_WINDOW_PANICS = ("model: mistral.rs {version} panics in its KV cache on a batch of a "
                         "sliding-window model's prompts of different lengths (kv_cache/mod.rs: "
                         "'shape mismatch on dim 2'; docs/findings.md report 24), losing the "
                         "engine: {name!r} has sliding_window={window}, refused")

_ARCHITECTURES = {"qwen2": "Qwen2", "llama": "Llama", "mistral": "Mistral",
                  "mixtral": "Mixtral", "phi3": "Phi3", "gemma2": "Gemma2", "gemma": "Gemma",
                  "qwen3": "Qwen3"}
_FINISHES = {"length": FinishReason.LENGTH, "stop": FinishReason.STOP}


@dataclass(slots=True)
class _Stream:
    """One request's stream, its thread, and what it produced so far."""

    live: Live
    tokens: list[int] = field(default_factory=list)
    tops: list[Mapping[int, float]] = field(default_factory=list)
    finish: FinishReason | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)


# The events a request's thread queues: a chunk's (tokens, top logprobs per token, the
# library's finish reason or None), the end of the stream, or the exception it raised.
_Event = tuple[str, str, Any]


class MistralRsEngine:
    """One `mistralrs.Runner`; a thread per request reads its stream into one queue."""

    def __init__(self, model_dir: str | Path, *, max_model_len: int, max_seqs: int = 32,
                 prefix_cache_n: int = 16, label: str = "mistralrs",
                 kv_cache_dtype: str = "float32") -> None:
        if kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype: {kv_cache_dtype!r}; expected one of "
                             f"{', '.join(KV_CACHE_DTYPES)}")
        for name, value, least in (("max_seqs", max_seqs, 1),
                                   ("prefix_cache_n", prefix_cache_n, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name}: must be an integer >= {least}, got {value!r}")
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        window = config.get("sliding_window")
        if window and config.get("use_sliding_window", True):
            raise ValueError(SLIDING_WINDOW_PANICS.format(
                version=mistralrs_version(), name=model_dir.name, window=window))
        arch = _ARCHITECTURES.get(str(config.get("model_type")))
        if arch is None:
            raise ValueError(f"model: mistral.rs's adapter maps no architecture for "
                             f"model_type {config.get('model_type')!r}; expected one of "
                             f"{sorted(_ARCHITECTURES)}")
        self.label = label
        self.vocab_size = int(config["vocab_size"])
        self.max_model_len = max_model_len
        self.kv_cache_dtype = kv_cache_dtype
        self._capabilities = Capabilities(
            # Its repetition penalty misses the prompt tokens a prefix-cache hit reused
            # (docs/findings.md report 25): only served where the cache is off.
            supported_sampling=(SUPPORTED_SAMPLING if prefix_cache_n == 0
                                else SUPPORTED_SAMPLING - {"repetition_penalty"}),
            expected_failed_checks={"seeds": SEEDS_LIMIT},
            # Processed (after its penalties: 1.8e-3 off the raw ones for a presence_penalty
            # of 0.5): the logprobs check compares them with a raw reference only where the
            # request's processing is the identity.
            logprobs_of="processed",
            max_concurrency=max_seqs,
            kv_cache_dtype=kv_cache_dtype)
        kv = "F32" if kv_cache_dtype == "float32" else "F16"
        self.execution = (f"mistral.rs {mistralrs_version()} on CPU (F32, {kv} KV cache, "
                          f"max_seqs {max_seqs}, prefix_cache_n {prefix_cache_n}; its own threads)")
        with _KV_LOCK:
            _claim_kv_dtype(kv_cache_dtype)
            self._runner = mistralrs.Runner(
                which=mistralrs.Which.Plain(model_id=str(model_dir),
                                            arch=getattr(mistralrs.Architecture, arch),
                                            dtype=mistralrs.ModelDType.F32),
                max_seqs=max_seqs, prefix_cache_n=prefix_cache_n, token_source="none",
                jinja_explicit=str(model_dir / "chat_template.jinja"))
        # The Runner is one Rust object borrowed mutably by each call, and a second call while
        # one runs raises "Already mutably borrowed": every call holds this lock (a stream's
        # chunks are read outside it).
        self._lock = threading.Lock()
        self._book = RequestBook()
        self._streams: dict[str, _Stream] = {}
        self._events: Inbox[_Event] = Inbox()

    # -- the protocol --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): F32 weights, and its KV cache's
        dtype (F32 unless asked for the library's f16)."""
        return self._capabilities

    def add_request(self, request: Request) -> None:
        key = self._book.add(request, vocab_size=self.vocab_size,
                             max_model_len=self.max_model_len,
                             supported=self._capabilities.supported_sampling)
        live = self._book.get(key)
        assert live is not None
        text = encode(request.prompt_token_ids)
        with self._lock:
            ids = list(self._runner.tokenize_text(text, False, None))
        if ids != [int(t) for t in request.prompt_token_ids]:
            self._book.discard(request.request_id)
            raise InvalidRequest(f"prompt_token_ids: the library's tokenizer reads the prompt's "
                                 f"text as {ids[:8]}..., not the requested ids")
        stream = _Stream(live)
        self._streams[key] = stream
        threading.Thread(target=self._read, args=(stream, self._chat_request(request, text)),
                         name=f"{self.label}-{key}", daemon=True).start()

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            self._streams.pop(key).cancelled.set()

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if not self._streams:
            return outputs
        events = self._events.take(None)  # the library computes meanwhile, on its own threads
        touched: dict[str, _Stream] = {}
        for key, kind, payload in events:
            stream = self._streams.get(key)
            if stream is None or stream.finish is not None:  # aborted, or ended by a stop id
                continue
            if kind == "error":
                raise RuntimeError(f"mistral.rs failed on request "
                                   f"{stream.live.request.request_id!r}: {payload}") from payload
            touched[key] = stream
            if kind == "end":  # the stream ended without a finish reason: the library's bug
                raise RuntimeError(f"mistral.rs ended request {stream.live.request.request_id!r}"
                                   f"'s stream after {len(stream.tokens)} tokens without a "
                                   "finish reason")
            self._take(stream, *payload)
        for key, stream in touched.items():
            # The new tokens' top logprobs only (delta takes what it returns, not all of it).
            tops = (stream.tops[stream.live.emitted:] if stream.live.request.params.logprobs
                    else None)
            out = self._book.delta(stream.live, stream.tokens, stream.finish, tops)
            if stream.finish is not None:
                stream.cancelled.set()  # its thread drops the stream at its next chunk
                del self._streams[key]
            if out is not None:
                outputs.append(out)
        return outputs

    def close(self) -> None:
        """Drop every stream (their threads stop at their next chunk)."""
        for stream in self._streams.values():
            stream.cancelled.set()

    # -- the library ---------------------------------------------------------------------------
    def _take(self, stream: _Stream, tokens: list[int], tops: list[Mapping[int, float]],
              finish: str | None) -> None:
        """One chunk into its request's state: the first stop id ends it (STOP), and nothing
        after it counts, in this chunk or any later one."""
        params = stream.live.request.params
        for i, token in enumerate(tokens):
            stream.tokens.append(token)
            if i < len(tops):
                stream.tops.append(tops[i])
            if token in params.stop_token_ids:
                stream.finish = FinishReason.STOP
                return
        if len(stream.tokens) >= params.max_tokens:
            stream.finish = FinishReason.LENGTH
        elif finish is not None:
            reason = _FINISHES.get(finish)
            if reason is None or reason is FinishReason.STOP:  # no EOS and no stop strings
                raise RuntimeError(f"mistral.rs ended request {params!r} with finish "
                                   f"{finish!r} after {len(stream.tokens)} tokens, short of "
                                   "its budget and without a stop id")
            stream.finish = reason

    def _chat_request(self, request: Request, text: str) -> Any:
        p = request.params
        top_k = int(p.top_k) if p.top_k > 0 else None
        return mistralrs.ChatCompletionRequest(
            messages=[{"role": "user", "content": text}], model="default",
            max_tokens=int(p.max_tokens), temperature=float(p.temperature),
            top_k=top_k, top_p=float(p.top_p) if p.top_p < 1.0 else None,
            repetition_penalty=(float(p.repetition_penalty) if p.repetition_penalty != 1.0
                                else None),
            presence_penalty=float(p.presence_penalty) if p.presence_penalty else None,
            frequency_penalty=float(p.frequency_penalty) if p.frequency_penalty else None,
            logprobs=p.logprobs > 0, top_logprobs=int(p.logprobs) if p.logprobs else None,
            stream=True)

    def _read(self, stream: _Stream, chat: Any) -> None:
        """A request's thread: its chunks into the queue until the stream ends or is dropped."""
        key, k = stream.live.key, stream.live.request.params.logprobs
        try:
            with self._lock:
                chunks: Iterator[Any] = iter(self._runner.send_chat_completion_request(chat))
            for chunk in chunks:
                if stream.cancelled.is_set():
                    break  # aborted or ended by a stop id: drop the stream
                choice = chunk.choices[0]
                tokens = [token_of(w) for w in (choice.delta.content or "").split()]
                tops: list[Mapping[int, float]] = []
                if k and choice.logprobs is not None:
                    ranked = sorted(choice.logprobs.top_logprobs, key=lambda t: -t.logprob)
                    tops = [{int(t.token): float(t.logprob) for t in ranked[:k]}]
                self._events.put((key, "chunk", (tokens, tops, choice.finish_reason)))
                if choice.finish_reason is not None:
                    return
            if not stream.cancelled.is_set():
                self._events.put((key, "end", None))
        except BaseException as exc:  # step() raises it on the caller's thread
            self._events.put((key, "error", exc))


def mistralrs_version() -> str:
    from importlib.metadata import version

    return version("mistralrs")


def mistralrs_engine(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_seqs: int = 32,
    prefix_cache_n: int = 16,
    max_model_len: int | None = None,
    label: str = "mistralrs",
    kv_cache_dtype: str = "float32",
) -> MistralRsEngine:
    """An engine over a preset or checkpoint (zero arguments: the "tiny" preset); its KV
    cache in `kv_cache_dtype` (KV_CACHE_DTYPES: float32, or the library's CPU default
    float16)."""
    path = mistralrs_dir(str(model), seed)
    max_model_len = max_model_len or preset_max_model_len(model) or 512
    return MistralRsEngine(path, max_model_len=max_model_len, max_seqs=max_seqs,
                           prefix_cache_n=prefix_cache_n, label=label,
                           kv_cache_dtype=kv_cache_dtype)


def _claim_kv_dtype(dtype: str) -> None:
    """Set KV_F32 for the process's first Runner (about to be built, under _KV_LOCK), or
    refuse a dtype other than the one that Runner fixed."""
    if _process_kv and _process_kv[0] != dtype:
        raise ValueError(f"kv_cache_dtype: {dtype!r}, but mistral.rs {mistralrs_version()} "
                         f"fixed this process's KV cache at {_process_kv[0]} when its first "
                         f"engine was built ({KV_F32} is read once): run it in a process of "
                         "its own")
    if not _process_kv:
        if dtype == "float32":
            os.environ[KV_F32] = "1"
        else:
            os.environ.pop(KV_F32, None)
        _process_kv.append(dtype)


# The conventional name for --engine.
make_engine = mistralrs_engine
