"""transformers' continuous batching behind the engine protocol.

Checked on transformers 5.16.0 through 5.24.0 (5.16 and 5.17 call the block size `block_size`
and lay the cache out differently: engines.adapters.hf.view). The library has no public
single-step call: its manager runs a background thread. This adapter starts no thread and
drives the manager's batch processor itself, one scheduler iteration per `step()`, with the
three calls that thread makes per iteration (`prepare_next_batch`, `_generation_step`,
`update_batch`); requests and cancellations go through the manager's public
`add_request` / `cancel_request`, and tokens come back through its output queue.

Translations (where the library's semantics differ from the protocol):
- stop tokens: passed as the request's `eos_token_id`; the library keeps the EOS token in its
  output, as the protocol does. It reports only "finished": STOP or LENGTH is read from the
  last token.
- abort: a cancelled request vanishes without an output, so the adapter emits the ABORT.
- sampling: the library samples from one global RNG at one global temperature; it has no
  per-request seed and no top logprobs. The adapter hooks its sampler
  (engines.adapters.hf.sampler).

- n > 1: the library's own forking (a request with `num_children` is prefilled but for its
  last prompt token, then forked into children `<id>__child#<i>` that share its KV blocks by
  copy, each sampling its own first token). Its count is the manager's (generation_config's
  num_return_sequences, which `add_request` reads), so the adapter sets it around each
  add_request. Child 0 is the request, child i the library's child i - 1; sampled children
  draw with seed + i (engines.core.children's rule) through the adapter's sampler. A
  one-token prompt's children are requests of their own: the library's fork fails there
  (docs/findings.md report 31). Greedy children use the fork too, which the library's
  own generate_batch refuses to configure (num_return_sequences needs do_sample there):
  they are identical, as the protocol's greedy children are.

Declared unsupported on transformers 5.25.0's continuous batching (absent from
supported_sampling, refused by name), with the reason:
- beam search (`beam_width`, `length_penalty`): its continuous batching has no beam search
  (generate's beam search runs outside it).
- stop strings: the manager takes stop ids only (`eos_token_id`); generate's stop strings
  (a StoppingCriteria) are not part of its path.
- logit processors (allowed_token_ids, logit_bias, bad_words, penalties, filters): its
  per-request processors are temperature, top-k and top-p only (cb_logits_processors.py);
  the rest would be this adapter's own sampling, not the library's.
- guided decoding, prompt logprobs: none in its continuous batching.
- lora, cache_salt: one model (one active PEFT adapter for every row, no per-request
  adapter), and its prefix sharing has no salt.

Beside the protocol: `max_concurrency`, `KVIntrospection` and `exercised()` (what the library's
scheduler did), read from its private state (engines.adapters.hf.view).
"""

from __future__ import annotations

import dataclasses
import functools
import queue
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation import ContinuousBatchingConfig, ContinuousBatchingManager
from transformers.generation.continuous_batching.requests import RequestStatus

from engines.adapters.common.book import Live, RequestBook, stop_or_length
from engines.adapters.common.children import Family
from engines.adapters.common.exercised import Tally
from engines.adapters.hf.sampler import RowSampler
from engines.adapters.hf.view import KVMixin, KVView, count_preemptions, count_prefix_hits
from engines.models import (
    DEFAULT_PRESET,
    DEFAULT_SEED,
    PRESETS,
    build_preset,
    load_checkpoint,
    long_rope_threshold,
    parse_dtype,
    preset_max_model_len,
)
from engines.protocol import BASE_PARAMS, Capabilities, Request, StepOutput

__all__ = ["HFContinuousEngine", "hf_continuous", "make_engine"]

# Tokens per KV block: `page_size` since 5.18, `block_size` in 5.16 and 5.17.
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
_PAGE_FIELD = "page_size" if "page_size" in _CONFIG_FIELDS else "block_size"


class HFContinuousEngine(KVMixin):
    """One `ContinuousBatchingManager`, stepped from the caller's thread."""

    # The library samples every row under one generation config, so per-request penalties,
    # top-k/top-p/min-p or min_tokens would be this adapter's sampling (engines/adapters/hf/
    # sampler.py), not transformers': the protocol's base fields only, the rest refused;
    # and n > 1 (below), the library's own fork.
    SUPPORTED_SAMPLING = BASE_PARAMS | {"n"}

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_model_len: int,
        max_batch_size: int = 8,
        max_batch_tokens: int = 256,
        page_size: int = 16,
        num_blocks: int | None = None,
        allow_block_sharing: bool = False,
        safety_margin: float | None = None,
        label: str = "hf_continuous",
    ) -> None:
        self.vocab_size: int = model.config.vocab_size
        self.max_model_len = max_model_len
        self.max_batch_size = max_batch_size
        self._model = model
        # The model's (its paged cache takes it too), read once: capabilities() is read
        # every step.
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self._failures = _known_failures(model)  # Capabilities.expected_failed_checks
        self._book = RequestBook()
        self._tally = Tally(label)
        # Sized explicitly: the library's defaults probe memory and cost ~10 s per call on a CPU.
        # By default enough blocks for a full batch at full context, so no request is evicted;
        # fewer blocks exercise the library's eviction (a request restarts from its tokens).
        if num_blocks is None:
            num_blocks = max_batch_size * -(-max_model_len // page_size)
        page: dict[str, Any] = {_PAGE_FIELD: page_size}
        cb_config = ContinuousBatchingConfig(
            num_blocks=num_blocks,
            **page,
            max_batch_tokens=max_batch_tokens,  # prompts longer than this prefill in chunks
            max_requests_per_batch=max_batch_size,
            # Prefix sharing: complete blocks are hashed and reused by later prompts.
            allow_block_sharing=allow_block_sharing,
            use_async_batching=False,  # async returns each token one iteration late
            use_cuda_graph=False,
            # Free share of the pool under which no new prefill starts (None: the scheduler's
            # own, 0.15 for FIFO); 0 admits until the pool is full, so decodes must evict.
            safety_margin=safety_margin,
            seed=DEFAULT_SEED,  # reseeds torch's global RNG when the processor is built
        )
        # Our own config: the library rewrites eos_token_id in the one it is given.
        generation_config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
        # (mypy sees nn.Module.__getattr__ here, not transformers' ContinuousMixin method)
        self._manager: ContinuousBatchingManager = model.init_continuous_batching(  # type: ignore[operator]
            generation_config=generation_config, continuous_batching_config=cb_config
        )
        with torch.random.fork_rng(devices=[]):  # keep the caller's global RNG as it was
            self._processor = self._manager._create_batch_processor()
        self._manager.batch_processor = self._processor
        self._kv = KVView(self._processor.cache)
        count_prefix_hits(self._processor.cache, self._tally)
        self._chunked: set[str] = set()
        self._sampler = RowSampler(self._processor.model_runner)
        # n > 1: the library's child keys -> (the request, the child's index, its sampling row)
        self._children: dict[str, tuple[Live, int, Live]] = {}
        self._families: dict[str, Family] = {}

    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): as many requests at once as one
        batch holds; kv_extra_blocks as it is now (one more while a fork is in flight:
        KVMixin._extra_blocks)."""
        return Capabilities(supported_sampling=self.SUPPORTED_SAMPLING,
                            expected_failed_checks=self._failures,
                            max_concurrency=self.max_batch_size,
                            kv_extra_blocks=self._extra_blocks(), dtype=self.dtype)

    def add_request(self, request: Request) -> None:
        params = request.params
        key = self._book.add(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                             supported=self.SUPPORTED_SAMPLING)
        live = self._book.get(key)
        assert live is not None
        self._sampler.add(self._row(live, 0, key))
        if params.n > 1:
            self._families[key] = Family(live, params.n)
            for i in range(1, params.n):
                child = f"{key}__child#{i - 1}"  # the library's name for its fork
                row = self._row(live, i, child)
                self._children[child] = (live, i, row)
                self._sampler.add(row)
        # The library forks after prefilling all but the prompt's last token, and crashes on a
        # one-token prompt (nothing to prefill: docs/findings.md report 31): there each
        # child is a request of its own under the child's key, the same computation unshared.
        own = params.n > 1 and len(request.prompt_token_ids) == 1
        keys = [key, *(f"{key}__child#{i}" for i in range(params.n - 1))] if own else [key]
        for library_key in keys:
            # The library's children count is the manager's (generation_config's
            # num_return_sequences, read by add_request): set for this request only.
            self._manager.num_return_sequences = 1 if own else params.n
            try:
                self._manager.add_request(
                    input_ids=[int(t) for t in request.prompt_token_ids],
                    request_id=library_key,
                    max_new_tokens=int(params.max_tokens),
                    streaming=True,  # one output per new token: each step's delta is complete
                    eos_token_id=[int(t) for t in params.stop_token_ids] or -1,
                )
            finally:
                self._manager.num_return_sequences = 1

    @staticmethod
    def _row(live: Live, index: int, key: str) -> Live:
        """What the sampler sees for child `index` (0: the request itself): the request with
        n = 1 and the child's derived seed (engines.core.children's rule, seed + index), under
        the library's key for it."""
        if live.request.params.n == 1:
            return live
        p = live.request.params
        seed = None if p.seed is None else p.seed + index
        return Live(dataclasses.replace(live.request, params=dataclasses.replace(
            p, n=1, seed=seed)), key)

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            family = self._families.get(key)
            if family is not None:  # each unfinished child's ABORT
                self._book.abort_children(request_id, [
                    i for i, done in enumerate(family.finished) if not done])
            # Its children before _forget(key), which drops the family's entries: a child
            # left uncancelled runs on in the library, holding blocks no request lists.
            children = [c for c, (live, _, _) in self._children.items() if live.key == key]
            self._manager.cancel_request(key)
            self._forget(key)
            for child in children:
                self._manager.cancel_request(child)
                self._forget(child)

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        # Owed ABORTs first: a cancel is applied at the start of the iteration below, so the
        # aborted request gets no token from it.
        outputs = self._book.take_aborts()
        scheduler = self._processor.scheduler
        active = set(scheduler.active_requests)
        with torch.no_grad():
            if self._processor.prepare_next_batch():
                count_preemptions(scheduler, active, self._tally)
                batch = self._processor.inputs_and_outputs.requests_in_batch
                for future in batch:  # a prefill that stops short of the prompt's end
                    key = future.state.request_id
                    if not future.has_new_token and key not in self._chunked:
                        self._chunked.add(key)
                        self._tally.add("chunked_prompts")
                self._sampler.rows = [
                    self._sampling_row(future.state.request_id)
                    for future in batch
                    if future.has_new_token
                ]
                self._processor._generation_step(self._model)
                self._processor.update_batch()
        results = self._manager.output_router.output_queue
        while True:
            try:
                result = results.get_nowait()
            except queue.Empty:
                break
            live, index = self._owner(result.request_id)
            if live is None:  # aborted before this output was read
                continue
            if result.status == RequestStatus.FAILED:
                raise RuntimeError(
                    f"transformers failed request {live.request.request_id!r}: {result.error}"
                )
            finish = None
            if result.is_finished():
                finish = stop_or_length(live.request, result.generated_tokens)
            top = self._sampler.take_top(result.request_id)
            family = self._families.get(live.key)
            if family is None:
                out = self._book.delta(live, result.generated_tokens, finish, top)
            else:
                out = family.delta(self._book, index, result.generated_tokens, finish, top)
            if finish is not None:
                self._forget(result.request_id)
            if out is not None:
                outputs.append(out)
        return outputs

    def _sampling_row(self, key: str) -> Live | None:
        child = self._children.get(key)
        if child is not None:
            return child[2] if self._book.get(child[0].key) is not None else None
        live = self._book.get(key)
        if live is not None and live.key in self._families:
            return self._row(live, 0, key)
        return live

    def _owner(self, key: str) -> tuple[Live | None, int]:
        """The request (still unfinished) an output of the library's `key` belongs to, and
        which child it is."""
        child = self._children.get(key)
        if child is not None:
            live, index, _ = child
            return (live if self._book.get(live.key) is not None else None), index
        return self._book.get(key), 0

    def _forget(self, key: str) -> None:
        self._sampler.forget(key)
        self._chunked.discard(key)
        child = self._children.pop(key, None)
        parent = child[0].key if child is not None else key
        family = self._families.get(parent)
        if family is not None and (family.done() or self._book.get(parent) is None):
            del self._families[parent]
            for c in [c for c, (live, _, _) in self._children.items() if live.key == parent]:
                del self._children[c]

    # -- what was exercised --------------------------------------------------------------------
    def exercised(self) -> dict[str, int]:
        """Preemptions, chunked prompts and prefix-cache hit tokens so far
        (engines.adapters.common.exercised)."""
        return self._tally.as_dict()


# transformers <= 5.24.0 (the newest): the paged attention functions continuous batching runs
# (eager_paged, sdpa_paged) drop the `softcap` their callers pass (docs/findings.md report 15).
SOFTCAP_DROPPED = ("transformers' continuous batching drops attention logit soft-capping "
                   "(docs/findings.md report 15): logits differ from the model's own forward")


# transformers <= 5.24.0 (the newest): on a long-RoPE model continuous batching picks the short
# or long factors from the largest position in the whole batch's forward, and never recomputes
# the keys rotated with the short ones when a sequence passes the threshold
# (docs/findings.md report 16): tokens depend on the neighbours and differ from generate's.
LONGROPE_BATCH_WIDE = ("transformers' continuous batching applies long-RoPE factors batch-wide "
                       "and never recomputes the cache at the threshold (docs/findings.md "
                       "report 16): tokens depend on the batch and differ from generate's")
LONGROPE_FAILS = ("parity", "reference_parity", "prefill_decode", "logprobs", "seeds")



def _known_failures(model: PreTrainedModel) -> dict[str, str]:
    known: dict[str, str] = {}
    if any(getattr(m, "attn_logit_softcapping", None) for m in model.modules()):
        known.update(dict.fromkeys(("reference_parity", "logprobs"), SOFTCAP_DROPPED))
    if long_rope_threshold(model.config) is not None:
        known.update(dict.fromkeys(LONGROPE_FAILS, LONGROPE_BATCH_WIDE))
    return known


@functools.lru_cache(maxsize=4)
def _private_model(spec: str, seed: int, dtype: str = "float32") -> PreTrainedModel:
    # Not engines.models.load_model's shared instance: the library switches the model's
    # attention implementation in place, which the other engines must not see.
    model = build_preset(spec, seed=seed) if spec in PRESETS else load_checkpoint(spec)
    return model.to(dtype=parse_dtype(dtype))  # type: ignore[call-arg]


def hf_continuous(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_model_len: int | None = None,
    dtype: str = "float32",
    **options: float | bool | str | None,
) -> HFContinuousEngine:
    """A fresh engine over a preset or checkpoint (zero arguments: the "tiny" preset), its
    weights cast to `dtype` (the preset's are built in float32)."""
    hf_model = _private_model(str(model), seed, dtype)
    max_model_len = (max_model_len or preset_max_model_len(model)
                     or hf_model.config.max_position_embeddings)
    return HFContinuousEngine(hf_model, max_model_len=max_model_len, **options)  # type: ignore[arg-type]


# The conventional name for --engine; test ids take the function's own: hf_continuous-<property>.
make_engine = hf_continuous
