"""CTranslate2's static batching (`ctranslate2` 4.8.5) behind the engine protocol.

One `ctranslate2.Generator` per engine, over the preset converted offline to float32
(engines.adapters.ct2.convert), on the CPU in float32 so that greedy tokens can match
transformers exactly. The library batches statically: `generate_batch` takes a whole batch
and returns when its last member ends. So the adapter forms a batch from what is waiting when
no batch runs (up to `max_batch_size`, oldest first); requests that arrive meanwhile wait for
the next batch, and the suite's workloads reach the batched path.

Steps: the batch runs in a worker thread, and the library's per-token `callback` (called once
per batch index and decoding iteration) holds it in lockstep with `step()`: each `step()` lets
it run one decoding iteration (the first one includes the prefill) and returns the tokens that
iteration produced. That keeps the protocol's meaning of a step (one unit of the engine's
work, tokens returned when they exist), so the bench's TTFT and ITL are the library's own,
not a whole batch's run handed out afterwards. An iteration boundary is where a batch index
calls back a second time; iterations that produce no token (the library feeds the rest of
a longer prompt token by token) fold into the next step.

Translations (where the library's semantics differ from the protocol):
- stop tokens and budgets: `end_token`, `max_length` and the sampling options apply to a whole
  batch, and the model's EOS (token 0 of the converted vocabulary) would stop every request.
  So the adapter passes `end_token=[]` and `max_length` = the batch's largest budget, and ends
  each request itself from the callback (returning True stops that batch index only): at a
  stop id (kept in the output, STOP) or at its budget (LENGTH).
- abort: the callback returns True at the aborted index's next token; the adapter emits the
  ABORT. A request still waiting is just dropped from the queue.
- batch keys: requests share a batch only when their sampling options (temperature, top_k,
  top_p) are equal, since the library takes them per batch.
- prompts of one token are batched only with prompts of one token: with
  `include_prompt_in_result=False`, a batch whose shortest prompt has one token gives the
  longer prompts wrong tokens (docs/findings.md, report 14).
- sampling: `sampling_temperature`, `sampling_topk` (0: the full vocabulary) and
  `sampling_topp`. Seeds are refused (InvalidRequest naming `seed`): the library's only
  seed, `ctranslate2.set_random_seed`, is process-wide, and reseeding it before a batch did
  not make the same request draw the same tokens twice here, so the `seeds` check is
  declared an expected failure with that reason.
- logprobs: accepted, and answered with `top_logprobs=None` (the protocol's "no logprobs
  from this engine"): the library has no top candidates per token (its callback's `log_prob`
  is the chosen token's only, and None unless asked for per batch).
- n > 1: the library's `num_hypotheses` (the whole batch's, so a batch holds requests of one
  n): sampled children are its independent hypotheses, each called back under its own
  `hypothesis_id` (a child's stop id or budget ends that child only); greedy children take
  `patience` n (the library refuses more hypotheses than beam_size x patience), the same
  tokens n times. Child k of a request is hypothesis k.
- bad_words: the library's `suppress_sequences` (per batch), batched only with requests of
  the same bad words and prompt length (engines.adapters.ct2.bad_words: report 30).
- beam search (`beam_width`, `n`, `length_penalty`): the library's beam search, which calls
  no callback, so a beam batch runs to its end within one step (engines.adapters.ct2.beams:
  its batching key, and the patience that keeps the library from stopping early).
- not mapped, declared by absence from supported_sampling: stop strings (the library's
  `end_token` takes tokens, not text, and the converted vocabulary is not the presets'
  tokenizer); allowed_token_ids, logit_bias and guided (ctranslate2 4.8.5's Python API has no
  logits processor); prompt_logprobs (no scores of prompt positions
  from a Generator's generate_batch); lora and cache_salt (no adapters, no prefix cache).
- not mapped: `repetition_penalty` (documented as over previously generated tokens: it left
  a prompt token unpenalized here, where ours covers prompt + output), `min_tokens`
  (`min_length` only suppresses `end_token`s, which the adapter does not use), min_p,
  frequency and presence penalties (absent). Requests asking for them are refused by name.

Not exposed by the library, so absent here (never faked): slot tables, KV blocks and counts
of what its scheduler did (so no SlotIntrospection, KVIntrospection or `exercised()`).
"""

from __future__ import annotations

import atexit
import json
import threading
import weakref
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ctranslate2

from engines.adapters.common.book import Live, RequestBook, stop_or_length
from engines.adapters.common.children import Family
from engines.adapters.common.gate import Gate
from engines.adapters.ct2.bad_words import bad_words_key, suppress_sequences
from engines.adapters.ct2.beams import beam_key, run_beams
from engines.adapters.ct2.convert import ct2_dir, vocabulary
from engines.models import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, preset_max_model_len
from engines.protocol import Capabilities, FinishReason, Request, StepOutput
from engines.threads import engine_threads

__all__ = ["CHUNKED_PREFILL_FAILS", "SEEDS_LIMIT", "SUPPORTED_SAMPLING", "CT2Engine",
           "chunked_prefill_fails", "converter_losses", "ctranslate2_engine", "make_engine"]

SUPPORTED_SAMPLING = frozenset({"max_tokens", "stop_token_ids", "temperature", "top_k", "top_p",
                                "logprobs", "n", "beam_width", "length_penalty", "bad_words"})
SEEDS_LIMIT = ("ctranslate2 has one process-wide seed (set_random_seed), which did not "
               "reproduce a request's draws when set again before it; seeded requests are "
               "refused")

_open_batches: weakref.WeakSet[_Batch] = weakref.WeakSet()


@atexit.register
def _cancel_open_batches() -> None:
    """A batch left mid-run (an engine dropped while broken) holds the library's worker in
    our callback: release it, so that the interpreter can exit."""
    for batch in list(_open_batches):
        batch.cancel()


def _batch_key(request: Request) -> tuple[Any, ...]:
    p = request.params
    one = len(request.prompt_token_ids) == 1  # report 14: never beside longer prompts
    if p.beam_width > 1:  # every option of a beam search is the whole batch's (beams.py)
        return beam_key(request)
    bad = bad_words_key(request)
    if p.temperature == 0:
        return (0.0, 1, 1.0, one, p.n, bad)
    return (float(p.temperature), max(int(p.top_k), 0), float(p.top_p), one, p.n, bad)


@dataclass
class _Batch:
    """One `generate_batch` call in its worker thread, and the gate between it and step()
    (engines.adapters.common.gate: one decoding iteration a step)."""

    lives: list[Live]
    n: int = 1  # children per request (the library's num_hypotheses, the whole batch's)
    seen: set[int] = field(default_factory=set)  # rows called back this iteration
    tokens: list[list[int]] = field(default_factory=list)  # per row, generated so far
    stopped: list[bool] = field(default_factory=list)  # per row: ended or aborted
    gate: Gate = field(default_factory=Gate)

    # Row r is child r % n of request r // n: the library's batch index and hypothesis id.
    def __post_init__(self) -> None:
        self.tokens = [[] for _ in range(len(self.lives) * self.n)]
        self.stopped = [False] * len(self.tokens)

    def __hash__(self) -> int:  # in a WeakSet: by identity
        return id(self)

    def callback(self, result: Any) -> bool:
        """The library's per-token callback, on its own worker thread: True stops the index."""
        i = int(result.batch_id) * self.n + int(result.hypothesis_id)
        with self.gate.cond:
            if i in self.seen:  # a new decoding iteration: the previous one is complete
                self.seen.clear()
                self.gate.next_round()
            self.gate.wait_turn()  # until step() lets this iteration run
            self.seen.add(i)
            if self.stopped[i]:
                return True
            self.tokens[i].append(int(result.token_id))
            params = self.lives[i // self.n].request.params
            if (len(self.tokens[i]) >= params.max_tokens
                    or self.tokens[i][-1] in params.stop_token_ids):
                self.stopped[i] = True
            return self.stopped[i]

    def cancel(self) -> None:
        with self.gate.cond:
            self.stopped = [True] * len(self.lives)
        self.gate.cancel()


# The library's compute types as (Capabilities.dtype, kv_cache_dtype): an int8 type quantizes
# the weights (its matrix products run in int8) and computes the rest, the KV cache included,
# in the float type it names (float32 for plain "int8" on a CPU). The float32 converted model
# is quantized when loaded. On this CPU ctranslate2 4.8.5 offers float32, int8 and
# int8_float32 only (get_supported_compute_types("cpu")): no bfloat16 or float16.
COMPUTE_TYPES: dict[str, tuple[str, str]] = {
    "float32": ("float32", "float32"), "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", "bfloat16"), "int8": ("int8", "float32"),
    "int8_float32": ("int8", "float32"), "int8_float16": ("int8", "float16"),
    "int8_bfloat16": ("int8", "bfloat16"),
}


class CT2Engine:
    """One `ctranslate2.Generator`; batches run in a worker thread, one iteration a step."""

    def __init__(self, model_dir: str | Path, *, max_batch_size: int, max_model_len: int,
                 label: str = "ctranslate2", compute_type: str = "float32") -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size: must be an integer >= 1, got {max_batch_size!r}")
        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type: {compute_type!r}; expected one of "
                             f"{', '.join(COMPUTE_TYPES)}")
        self.label = label
        self.dtype, self.kv_cache_dtype = COMPUTE_TYPES[compute_type]
        self._words = vocabulary(Path(model_dir))
        self.vocab_size = len(self._words)
        self.max_model_len = max_model_len
        self.max_batch_size = max_batch_size
        # Capabilities.expected_failed_checks (ctranslate2_engine adds its model's).
        self._failures: dict[str, str] = {"seeds": SEEDS_LIMIT}
        # The threads this process may use (taskset) or the bench's --threads
        # (engines.threads), not the library's default of 4.
        self.compute_threads = engine_threads()
        self.execution = f"ctranslate2 {ctranslate2.__version__} on CPU"
        self._gen = ctranslate2.Generator(str(model_dir), device="cpu", compute_type=compute_type,
                                          inter_threads=1, intra_threads=self.compute_threads)
        self._book = RequestBook()
        self._waiting: deque[Live] = deque()
        self._batch: _Batch | None = None
        self._families: dict[str, Family] = {}  # requests with n > 1 in the batch running
        self._thread: threading.Thread | None = None

    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities), as many requests at once as one
        batch runs, and its compute type's precision (COMPUTE_TYPES: float32 by default)."""
        return Capabilities(supported_sampling=SUPPORTED_SAMPLING,
                            expected_failed_checks=self._failures,
                            max_concurrency=self.max_batch_size, dtype=self.dtype,
                            kv_cache_dtype=self.kv_cache_dtype)

    # -- the protocol --------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        key = self._book.add(request, vocab_size=self.vocab_size,
                             max_model_len=self.max_model_len, supported=SUPPORTED_SAMPLING)
        live = self._book.get(key)
        assert live is not None
        self._waiting.append(live)

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is None:
            return
        self._owe_children(request_id, key)
        for live in self._waiting:
            if live.key == key:
                self._waiting.remove(live)
                return
        batch = self._batch
        if batch is not None:
            with batch.gate.cond:
                for i, live in enumerate(batch.lives):
                    if live.key == key:
                        for row in range(i * batch.n, (i + 1) * batch.n):
                            batch.stopped[row] = True

    def _owe_children(self, request_id: Hashable, key: str) -> None:
        """An aborted request with n > 1 (or beams' n best): its ABORT to each child that has
        not finished (its family's, once it has one; every child before)."""
        lives = [*self._waiting, *(self._batch.lives if self._batch is not None else [])]
        n = next((live.request.params.n for live in lives if live.key == key), 1)
        if n > 1:
            family = self._families.get(key)
            done = family.finished if family is not None else [False] * n
            self._book.abort_children(request_id, [i for i in range(n) if not done[i]])

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if self._batch is None and self._waiting:
            if self._waiting[0].request.params.beam_width > 1:
                return outputs + self._beam_search()
            self._start()
        batch = self._batch
        if batch is None:
            return outputs
        with batch.gate.cond:
            batch.gate.run_one()
            snapshot = [(list(t), s) for t, s in zip(batch.tokens, batch.stopped, strict=True)]
        for row, (tokens, stopped) in enumerate(snapshot):
            live = batch.lives[row // batch.n]
            if self._book.get(live.key) is None:  # aborted (its ABORT is owed) or finished
                continue
            finish = None
            if stopped or batch.gate.done:
                last = tokens[-1] if tokens else None
                finish = (FinishReason.STOP if last in live.request.params.stop_token_ids
                          else FinishReason.LENGTH)
            if batch.n > 1:
                family = self._families.setdefault(live.key, Family(live, batch.n))
                out = family.delta(self._book, row % batch.n, tokens, finish)
                if family.done():
                    del self._families[live.key]
            else:
                out = self._book.delta(live, tokens, finish)
            if out is not None and live.request.params.logprobs:
                out = replace(out, top_logprobs=None, logprobs=None)  # none from the library
            if out is not None:
                outputs.append(out)
        if batch.gate.done:
            assert self._thread is not None
            self._thread.join()
            self._batch = self._thread = None
            for live in batch.lives:  # an aborted request's children, never finished
                self._families.pop(live.key, None)
        return outputs

    def _beam_search(self) -> list[StepOutput]:
        """The next waiting beam-search batch, run to its end in this step (the library calls
        no callback under beam search, so its iterations cannot be stepped one at a time)."""
        key = beam_key(self._waiting[0].request)
        lives = [live for live in self._waiting if beam_key(live.request) == key]
        lives = lives[: self.max_batch_size]
        for live in lives:
            self._waiting.remove(live)
        prompts = [[self._words[t] for t in live.request.prompt_token_ids] for live in lives]
        beams = run_beams(self._gen, prompts, lives[0].request, self._words)
        outputs = []
        for live, children in zip(lives, beams, strict=True):
            family = Family(live, len(children))
            for index, tokens in enumerate(children):
                out = family.delta(self._book, index, tokens,
                                   stop_or_length(live.request, tokens))
                if out is not None and live.request.params.logprobs:
                    out = replace(out, top_logprobs=None, logprobs=None)
                if out is not None:
                    outputs.append(out)
        return outputs

    def _start(self) -> None:
        key = _batch_key(self._waiting[0].request)
        lives = [live for live in self._waiting if _batch_key(live.request) == key]
        lives = lives[: self.max_batch_size]
        for live in lives:
            self._waiting.remove(live)
        n = lives[0].request.params.n
        batch = _Batch(lives, n)
        temperature, topk, topp = key[:3]
        options = {
            "max_length": max(live.request.params.max_tokens for live in lives),
            "include_prompt_in_result": False,
            "end_token": [],  # the adapter ends each request itself (module docstring)
            "beam_size": 1,
            "sampling_topk": min(topk, self.vocab_size),  # top_k past the vocabulary: all of it
            "sampling_topp": topp,
            "sampling_temperature": temperature or 1.0,
            "callback": batch.callback,
            # n children: the library's hypotheses, drawn independently when sampling. A
            # greedy search returns more than one only with patience >= n (the same tokens
            # n times: greedy children agree).
            "num_hypotheses": n,
            "patience": float(n) if topk == 1 else 1.0,
            "suppress_sequences": suppress_sequences(lives[0].request, self._words),
        }
        prompts = [[self._words[t] for t in live.request.prompt_token_ids] for live in lives]

        def run() -> None:
            error: BaseException | None = None
            try:
                self._gen.generate_batch(prompts, **options)
            except BaseException as exc:  # step() raises it on the caller's thread
                error = exc
            batch.gate.finish(error)

        self._batch = batch
        _open_batches.add(batch)
        self._thread = threading.Thread(target=run, name=f"{self.label}-batch", daemon=True)
        self._thread.start()

    def __del__(self) -> None:
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.cancel()


def ctranslate2_engine(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_batch_size: int = 8,
    max_model_len: int | None = None,
    label: str = "ctranslate2",
    compute_type: str = "float32",
) -> CT2Engine:
    """An engine over a preset or checkpoint (zero arguments: the "tiny" preset), computing
    at `compute_type` (the library's name: COMPUTE_TYPES)."""
    path = ct2_dir(str(model), seed)
    max_model_len = max_model_len or preset_max_model_len(model) or 512
    engine = CT2Engine(path, max_batch_size=max_batch_size, max_model_len=max_model_len,
                       label=label, compute_type=compute_type)
    config = _source_config(str(model))
    engine._failures.update(converter_losses(config))
    engine._failures.update(chunked_prefill_fails(config, max_model_len))
    return engine


# ctranslate2 <= 4.8.5 (the newest): what its converter drops, so that the converted model is
# not the checkpoint's (docs/findings.md report 18). Each costs reference_parity (the tokens
# are consistent across batches, but not the model's).
CONVERTER_LOSES = ("ctranslate2's converter drops {} (docs/findings.md report 18): tokens "
                   "differ from the model's own")


def converter_losses(config: dict[str, Any]) -> dict[str, str]:
    """The expected failures a checkpoint's config (config.json's fields) implies."""
    lost = []
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type") == "llama3":  # wrong even where the field is Llama-3.1's 8192
        lost.append("Llama-3 RoPE's original_max_position_embeddings")
    if config.get("model_type") == "gemma2":
        lost.append("Gemma-2's attention and final logit soft-capping and its sliding window")
    if not lost:
        return {}
    return {"reference_parity": CONVERTER_LOSES.format(" and ".join(lost))}


# ctranslate2 <= 4.8.5 (the newest): a model whose decoder has a sliding window (what the
# Mistral loader writes) has the prompt's forwarded part prefilled in chunks of the window, and
# a query of chunk i >= 1 attends to the whole previous chunk as well as its own up to itself
# (up to twice the window), where the model attends to the last `window` positions; tokens fed
# one at a time (the tail of a longer prompt beside a shorter one, and every generated token)
# see the window. So a prompt of more than window + 1 tokens gets other tokens alone than in a
# batch with a shorter one, and than the model's (docs/findings.md report 22). Every check
# that compares a request's tokens with its tokens alone or the reference's fails. Not
# `bad_input` or `stateful`: they re-judge parity only where it is not declared (bad_input's
# good requests, the machine's teardown), and nothing else of theirs fails.
CHUNKED_PREFILL_FAILS = ("parity", "reference_parity", "prefill_decode")
CHUNKED_PREFILL = ("ctranslate2 prefills a sliding-window model's prompt in chunks of the "
                   "window (here {window}), a later chunk's queries attending past the window "
                   "(docs/findings.md report 22): a prompt of more than {window} + 1 tokens "
                   "gets other tokens alone than batched and than the model's")


def chunked_prefill_fails(config: dict[str, Any], max_model_len: int) -> dict[str, str]:
    """The expected failures of ctranslate2's chunked prefill (report 22) for a checkpoint's
    config: declared where the Mistral loader passes the window and a prompt can be longer
    than the window + 1 tokens (a prompt's last token is never forwarded in the prefill; a
    prompt leaves at least one token of max_model_len to its budget)."""
    window = config.get("sliding_window")
    if config.get("model_type") != "mistral" or not window or max_model_len < window + 3:
        return {}
    reason = CHUNKED_PREFILL.format(window=window)
    return dict.fromkeys(CHUNKED_PREFILL_FAILS, reason)


def _source_config(model: str) -> dict[str, Any]:
    if model in PRESETS:
        preset = PRESETS[model]
        return {**preset.config, "model_type": preset.architecture}
    config: dict[str, Any] = json.loads((Path(model) / "config.json").read_text())
    return config


# The conventional name for --engine.
make_engine = ctranslate2_engine
