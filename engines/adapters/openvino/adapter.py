"""OpenVINO GenAI's continuous batching (`openvino-genai` 2026.4.1) behind the engine protocol.

One `openvino_genai.ContinuousBatchingPipeline` per engine, over the preset converted offline
to an fp32 IR (engines.adapters.openvino.convert), on the CPU with fp32 inference and an fp32
KV cache, so that greedy tokens can match transformers exactly. The pipeline's own
`add_request` / `step` / `has_non_finished_requests` loop is the protocol's; `step()` is one
scheduler iteration of the library's (paged KV, chunked prefill "dynamic split-fuse", prefix
caching, preemption by recompute: all reachable through `OpenVINOConfig`).

Translations (where the library's semantics differ from the protocol):
- stop tokens: the library substitutes the model's EOS (its converted tokenizer's: the
  presets' BPE's <|endoftext|>) for a request whose `eos_token_id` is unset, and
  `ignore_eos=True` silently disables `stop_token_ids` as well. So a request with no stop ids
  runs with `ignore_eos=True` and EOS 0 named (the Mistral, Mixtral and Phi-3 conversions
  have EOS -1, which the library's validation refuses), and one with stop ids names the
  first as its EOS
  (`set_eos_token_id`) and passes them all as `stop_token_ids`. The library keeps the stop
  token in its output, as the protocol does, and reports STOP or LENGTH itself.
- outputs: a handle's `read()` returns the tokens generated since the last read; n > 1 and
  beam search come back as sequences (engines.adapters.openvino.sequences).
- wave 4: speculation (engines.adapters.openvino.speculation), guided decoding
  (engines.adapters.openvino.guided, a variant's); what is not declared, and why, beside
  SUPPORTED_SAMPLING.
- abort: `handle.cancel()` drops the request silently, so the adapter emits the ABORT.
- dropped requests: the library can give up on a request it did not finish, with no output
  (status IGNORED: it found no KV blocks for it, e.g. beside a request cancelled in a full
  pool, docs/findings.md report 8). The protocol has no such outcome, so `step()` raises
  `RequestDropped` naming the request, rather than waiting forever for its tokens.
- sampling: temperature, seeded per request with `rng_seed` (the seed modulo 2**64); an
  unseeded request gets a fresh random seed, as the library's default seed (0) would make every
  unseeded request draw alike. The library's processing has the protocol's semantics for
  `repetition_penalty` (prompt + output, divides positive logits, multiplies negative ones, in
  greedy decoding too), `top_k`, `top_p`, `min_p` (sampled requests only; its order top_k ->
  temperature -> min_p -> top_p keeps the same tokens as the protocol's) and `min_tokens`
  (`min_new_tokens`: the stop ids are masked until then), so those are mapped and declared.
  `presence_penalty` and `frequency_penalty` are not declared: the library moves a penalised
  logit towards zero (subtracts from a positive one, ADDS to a negative one), where the
  protocol, vLLM and OpenAI always subtract (docs/findings.md report 9), so the suite never
  sends them and its summary names them as not tested.
- logprobs: the library returns the chosen token's logprob only (of the raw distribution),
  never other candidates. For a greedy request without processing that is the top candidate,
  so `logprobs=1` is served exactly; a request that asks for more candidates, samples, or
  decodes greedily under a repetition penalty or min_tokens (whose chosen token need not be
  the raw top one) gets `top_logprobs=None` (the protocol's "no logprobs from this engine"):
  `LOGPROBS_LIMIT` says so. The sampled token's own logprob is always served.
- long-RoPE models (Phi-3, Phi-3.5, Phi-4-mini): the exported graph picks the short or long
  factors from the largest position id it is given, and the library gives it every token of a
  step, of every request, at once; nor does it recompute a sequence's KV when the sequence
  passes the threshold (transformers' generate does). So tokens depend on the batch and differ
  from the reference past the threshold (docs/findings.md report 21): declared, as strict
  xfails, where a request can pass the threshold (max_model_len above it).

Not exposed by the library's Python API, so absent here (never faked): block tables (so no
`KVIntrospection`; `kv_cache_usage()` gives the pool's occupancy it does report), and counts of
preemptions, chunked prompts and prefix-cache hits (so no `exercised()`).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import openvino
import openvino_genai

from engines.adapters.common.book import Live, RequestBook
from engines.adapters.openvino.convert import openvino_dir, tokenizer_dir
from engines.adapters.openvino.guided import guided_stop, structured_output
from engines.adapters.openvino.precision import declared_precision
from engines.adapters.openvino.sequences import Sequences
from engines.adapters.openvino.speculation import ACCEPTED, Speculation, accepted_in
from engines.models import (
    DEFAULT_PRESET,
    DEFAULT_SEED,
    PRESETS,
    long_rope_threshold,
    preset_max_model_len,
)
from engines.protocol import (
    BASE_PARAMS,
    PROCESSING_PARAMS,
    Capabilities,
    FinishReason,
    InvalidRequest,
    Request,
    SamplingParams,
    StepOutput,
)
from engines.threads import engine_threads

__all__ = [
    "BEAM_MIN_TOKENS",
    "BLOCK_SIZE",
    "LOGPROBS_LIMIT",
    "LONGROPE_FAILS",
    "OpenVINOConfig",
    "OpenVINOEngine",
    "SPECULATIVE_SAMPLING",
    "STRUCTURED_SAMPLING",
    "SUPPORTED_SAMPLING",
    "RequestDropped",
    "SpeculativeOpenVINOEngine",
    "known_differences",
    "make_engine",
    "openvino_genai_engine",
]

BLOCK_SIZE = 32  # tokens per KV block of the CPU plugin (its pool is sized in these)
LOGPROBS_LIMIT = ("openvino-genai returns the chosen token's logprob only: top_logprobs is "
                  "served for greedy requests with logprobs=1 and no repetition penalty or "
                  "min_tokens, and is None otherwise")
# Its presence and frequency penalties move a logit towards zero (docs/findings.md report 9).
# Wave 4: n (num_return_sequences) and beam search (num_beams, length_penalty) are mapped
# and declared (a beam request without stop ids names an EOS past the vocabulary: the
# library's beam search ends beams at its EOS whatever ignore_eos says); guided decoding (its
# StructuredOutputConfig) is a variant's (STRUCTURED_SAMPLING). Not
# declared (docs/engines.md): stop strings (the library cuts the tokens of a stop string out of
# the output, and may end a request with no output at all: docs/findings.md report 32),
# allowed ids, logit bias and bad words (no GenerationConfig field), prompt logprobs (none in
# the pipeline's outputs), LoRA (not applied per request under add_request/step) and cache
# salts (no such field).
SUPPORTED_SAMPLING = ((BASE_PARAMS | PROCESSING_PARAMS) - {"presence_penalty", "frequency_penalty"}
                      | {"n", "beam_width", "length_penalty"})
# The library's beam search ignores min_new_tokens (2026.4.1: a beam of the best first token
# alone, a stop id, came back under min_tokens 2; issue 51, docs/findings.md report 49):
# refused rather than ignored.
BEAM_MIN_TOKENS = ("min_tokens: {!r} is not supported with beam search (beam_width {}): "
                   "openvino-genai's beam search ignores min_new_tokens "
                   "(docs/findings.md report 49)")
# The structured-output variant's (engines.adapters.openvino.variants).
STRUCTURED_SAMPLING = SUPPORTED_SAMPLING | {"guided"}
# A speculating pipeline refuses beams and n > 1 ("Beam search and parallel sampling are not
# compatible with assistant generation"), and does not hold a stop id back until min_tokens
# in the tokens it verifies (docs/findings.md report 40).
SPECULATIVE_SAMPLING = SUPPORTED_SAMPLING - {"n", "beam_width", "length_penalty", "min_tokens"}
# fp32 everywhere: the CPU plugin's defaults (bf16 inference where the CPU has it, a u8 or f16
# KV cache) would move greedy tokens at near-ties. The deployment-precision variants pass
# their own (engines.adapters.openvino.variants, precision.py).
PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}

_FINISH = {
    openvino_genai.GenerationFinishReason.STOP: FinishReason.STOP,
    openvino_genai.GenerationFinishReason.LENGTH: FinishReason.LENGTH,
}


class RequestDropped(RuntimeError):
    """The library ended a request it was not asked to end, without finishing it."""


@dataclass(frozen=True, slots=True)
class OpenVINOConfig:
    """The `SchedulerConfig` fields the adapter sets (the others keep the library's defaults)."""

    num_kv_blocks: int  # the KV pool, in BLOCK_SIZE-token blocks (cache_size is then 0)
    max_num_seqs: int = 8  # requests scheduled at once
    max_num_batched_tokens: int = 256  # tokens one step may compute (the library's default)
    dynamic_split_fuse: bool = True  # chunked prefill under that budget (the library's default)
    enable_prefix_caching: bool = False

    def scheduler_config(self) -> Any:
        sc = openvino_genai.SchedulerConfig()
        sc.cache_size = 0  # sized by num_kv_blocks, not by GB
        sc.num_kv_blocks = self.num_kv_blocks
        sc.max_num_seqs = self.max_num_seqs
        sc.max_num_batched_tokens = self.max_num_batched_tokens
        sc.dynamic_split_fuse = self.dynamic_split_fuse
        sc.enable_prefix_caching = self.enable_prefix_caching
        return sc


def _generation_config(p: SamplingParams, speculation: Speculation | None = None,
                       eos: int = 0, vocab_size: int | None = None) -> Any:
    if p.beam_width > 1 and p.min_tokens:
        raise InvalidRequest(BEAM_MIN_TOKENS.format(p.min_tokens, p.beam_width))
    gc = openvino_genai.GenerationConfig()
    if speculation is not None:
        speculation.configure(gc)
    gc.max_new_tokens = int(p.max_tokens)
    stops = [int(t) for t in p.stop_token_ids]
    if p.guided is not None:
        # The grammar ends a request by forcing its EOS (`eos`, the tokenizer's): ignore_eos
        # would let it run on unconstrained after it (engines.adapters.openvino.guided).
        gc.structured_output_config = structured_output(p.guided)
        gc.ignore_eos = False
        gc.set_eos_token_id(eos)  # and no other stop id: the adapter watches for those
    elif stops:
        gc.ignore_eos = False
        gc.set_eos_token_id(stops[0])  # else the model's EOS (token 0) would stop it
        gc.stop_token_ids = set(stops)
    else:
        gc.ignore_eos = True  # safe only here: it also disables stop_token_ids
        # A valid id, ignored under ignore_eos: left unset, the library fills in the model's
        # EOS, which is -1 in the Mistral, Mixtral and Phi-3 conversions (optimum writes no
        # EOS for them), and then refuses the request ("'stop_token_ids' must be non-negative").
        # Beam search ignores ignore_eos: its searcher ends a beam at any stop id, the named
        # EOS among them (a beam without stop ids ended STOP at token 0). There the EOS is an
        # id past the vocabulary, no beam's candidate (set_eos_token_id adds to the stop ids:
        # one call only).
        beams = p.beam_width > 1 and vocab_size is not None
        gc.set_eos_token_id(int(vocab_size) if beams and vocab_size is not None else 0)
    if p.min_tokens and (stops or p.guided is not None):
        # Masks the stop ids until then (the protocol's min_tokens; with none it does
        # nothing): the library masks its stop ids whatever ignore_eos says, and indexes the
        # logits by them (the placeholder EOS above is not a stop id of the request's).
        gc.min_new_tokens = int(p.min_tokens)
    if p.repetition_penalty != 1.0:
        gc.repetition_penalty = float(p.repetition_penalty)
    if p.temperature > 0:
        gc.do_sample = True
        gc.temperature = float(p.temperature)
        if p.top_k > 0:  # the library's "off" is the largest size_t, its default
            gc.top_k = int(p.top_k)
        gc.top_p = float(p.top_p)
        if p.min_p < 1.0:
            gc.min_p = float(p.min_p)
        else:  # the library refuses min_p = 1, which keeps the most likely token only
            gc.top_k = 1
        gc.rng_seed = random.getrandbits(64) if p.seed is None else int(p.seed) % 2**64
    else:
        gc.do_sample = False
    if p.logprobs > 0:
        gc.logprobs = 1
    if p.beam_width > 1:  # greedy over beams (the protocol's beam search samples nothing)
        gc.do_sample = False
        gc.num_beams = int(p.beam_width)
        gc.num_return_sequences = int(p.beam_width)  # every beam comes back (sequences.py)
        gc.length_penalty = float(p.length_penalty)
        # The protocol's search (engines.core.beams) runs until no beam can still overtake the
        # finished ones: transformers' early_stopping="never", the library's NEVER (its
        # default HEURISTIC can stop before a longer beam overtakes).
        gc.stop_criteria = openvino_genai.StopCriteria.NEVER
    elif p.n > 1:
        gc.num_return_sequences = int(p.n)
        if not gc.do_sample:  # the library refuses greedy n > 1: top_k 1 is the argmax
            gc.do_sample = True
            gc.top_k = 1
            gc.rng_seed = 0
    return gc


def _serves_logprobs(p: SamplingParams) -> bool:
    # Greedy without processing: the chosen token is then the raw distribution's top one.
    return (p.logprobs == 1 and p.temperature == 0 and p.repetition_penalty == 1.0
            and (p.min_tokens == 0 or not p.stop_token_ids) and p.beam_width == 1)


def _children(p: SamplingParams) -> Sequences | None:
    """How a request's sequences become children (None: one sequence, the plain path)."""
    if p.beam_width > 1:
        return Sequences(n=p.n, beams=True)
    return Sequences(n=p.n, beams=False) if p.n > 1 else None


class OpenVINOEngine:
    """One `ContinuousBatchingPipeline`, stepped from the caller's thread."""

    # What it declares whatever its configuration: raw logprobs (the library snapshots the
    # logits before any processing). A variant narrows or widens what an engine declares
    # with declare(): one that maps text declares its tokenizer.
    CAPABILITIES = Capabilities(supported_sampling=SUPPORTED_SAMPLING, logprobs_of="raw",
                                refused_with_beams=frozenset({"min_tokens"}))

    def __init__(self, model_dir: str | Path, config: OpenVINOConfig, *, max_model_len: int,
                 vocab_size: int, label: str = "openvino_genai",
                 threads: int | None = None, speculation: Speculation | None = None,
                 seed: int = DEFAULT_SEED, precision: Mapping[str, str] = PROPERTIES) -> None:
        self.config = config
        self.label = label
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.max_batch_size = config.max_num_seqs
        self._capabilities = replace(
            self.CAPABILITIES, expected_failed_checks=known_differences(Path(model_dir),
                                                                         max_model_len),
            max_concurrency=config.max_num_seqs)  # requests the scheduler runs at once
        # The presets' BPE the IR's tokenizer was converted from (engines.adapters.openvino
        # .convert), declared (Capabilities.tokenizer) where guided decoding is: a grammar is
        # text. The library's step loop gives no text, so StepOutput.text is None throughout.
        self.tokenizer_path = str(tokenizer_dir(Path(model_dir)))
        # Stated, not the plugin's default (every core the process sees): engines.threads.
        self.compute_threads = threads or engine_threads()
        self.execution = f"openvino-genai {openvino_genai.__version__.split('-')[0]} on CPU"
        self.speculation = speculation
        device = {**precision, "INFERENCE_NUM_THREADS": self.compute_threads}
        # Read once: capabilities() is read every step.
        self.dtype, self.kv_cache_dtype = declared_precision(precision)
        if speculation is not None:
            self.execution += f", speculating: {speculation.describe()}"
        extra = {} if speculation is None else speculation.properties(seed, device)
        self._pipe = openvino_genai.ContinuousBatchingPipeline(
            str(model_dir), config.scheduler_config(), "CPU", {**device, **extra})
        self._accepted = 0  # tokens gained beyond one in a step (speculation.accepted_in)
        # The converted tokenizer's EOS (the presets' BPE: <|endoftext|>, the last id): the
        # token the library's grammars end with.
        self._eos = max(0, int(self._pipe.get_tokenizer().get_eos_token_id()))
        self._book = RequestBook()
        self._handles: dict[str, Any] = {}  # our key -> the library's handle
        self._tokens: dict[str, list[int]] = {}  # our key -> tokens generated so far
        self._children: dict[str, Sequences] = {}  # n > 1 or beams: our key -> its children
        self._done: dict[str, set[int]] = {}  # and the children finished
        self._ids = itertools.count()  # the library's request ids (integers)

    # -- the protocol --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): the inference and KV-cache
        precision it was compiled with (f32 and f32 unless a variant says otherwise:
        PROPERTIES); a tokenizer where a variant declares one."""
        return replace(self._capabilities, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype)

    def declare(self, **changes: Any) -> None:
        """Change what capabilities() says (Capabilities' fields by name): a variant narrows
        the fields its configuration cannot serve, or declares what it knowingly breaks."""
        self._capabilities = replace(self._capabilities, **changes)

    def add_request(self, request: Request) -> None:
        key = self._book.add(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                             supported=self._capabilities.supported_sampling)
        prompt = openvino.Tensor(np.array([request.prompt_token_ids], dtype=np.int64))
        try:
            handle = self._pipe.add_request(
                next(self._ids), prompt,
                _generation_config(request.params, self.speculation, self._eos,
                                   self.vocab_size))
        except BaseException:
            self._book.discard(request.request_id)
            raise
        self._handles[key] = handle
        self._tokens[key] = []
        children = _children(request.params)
        if children is not None:
            self._children[key] = children
            self._done[key] = set()

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            self._handles.pop(key).cancel()
            del self._tokens[key]
            children = self._children.pop(key, None)
            if children is not None:  # each unfinished child's ABORT
                done = self._done.pop(key)
                self._book.abort_children(request_id,
                                          [i for i in range(children.n) if i not in done])

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if self._pipe.has_non_finished_requests():
            self._pipe.step()
        # Read every live request even when the library has nothing left to run: one it
        # dropped is then seen (and raised) instead of waited for.
        for live in self._book.live():
            if live.key in self._children:
                outputs.extend(self._read_children(live))
                continue
            out = self._read(live)
            if out is not None:
                outputs.append(out)
        return outputs

    def _dropped(self, live: Live, handle: Any) -> None:
        status = handle.get_status()
        if status != openvino_genai.GenerationStatus.RUNNING:  # ended without an output
            raise RequestDropped(
                f"openvino-genai ended request {live.request.request_id!r} with status "
                f"{status.name} after {live.emitted} of its {live.request.params.max_tokens}"
                " tokens, unasked and with no finish reason")

    def _read_children(self, live: Live) -> list[StepOutput]:
        """A request with n > 1 or beams: one output per child that gained tokens or
        finished (engines.adapters.openvino.sequences)."""
        handle, children = self._handles[live.key], self._children[live.key]
        done, params = self._done[live.key], live.request.params
        if children.beams and handle.get_status() == openvino_genai.GenerationStatus.RUNNING:
            return []  # read a beam search once, finished
        if not handle.can_read():
            self._dropped(live, handle)
            return []
        outputs = []
        for child in children.children(handle.read()):
            finish = _FINISH.get(child.finish)
            if child.index in done or not child.tokens and finish is None:
                continue
            if not children.beams:
                self._accepted += accepted_in(len(child.tokens))
            # Beams: the library's per-token values are not the protocol's (none served).
            sampled = (tuple(child.logprobs) if params.logprobs and not children.beams
                       else None)
            tops = (tuple({t: v} for t, v in zip(child.tokens, child.logprobs, strict=True))
                    if sampled is not None and _serves_logprobs(params) else None)
            outputs.append(StepOutput(live.request.request_id, tuple(child.tokens), finish,
                                      tops, sampled, index=child.index))
            if finish is not None:
                done.add(child.index)
        if len(done) == params.n:
            self._book.discard(live.request.request_id)  # every child's finish is out
            for table in (self._handles, self._tokens, self._children, self._done):
                del table[live.key]  # type: ignore[attr-defined]
        return outputs

    def _read(self, live: Live) -> StepOutput | None:
        handle = self._handles[live.key]
        if not handle.can_read():
            self._dropped(live, handle)
            return None
        new: list[int] = []
        logprobs: list[float] = []
        finish = None
        for result in handle.read().values():  # one sequence per request: no beams, n=1
            new.extend(int(t) for t in result.generated_ids)
            self._accepted += accepted_in(len(result.generated_ids))
            logprobs.extend(float(v) for v in result.generated_log_probs)
            finish = _FINISH.get(result.finish_reason)
        params = live.request.params
        tokens = self._tokens[live.key]
        cut = guided_stop(params, len(tokens), new)
        if cut is not None:  # the adapter's own stop ids of a guided request (guided.py)
            new, logprobs, finish = new[:cut], logprobs[:cut], FinishReason.STOP
            if handle.get_status() == openvino_genai.GenerationStatus.RUNNING:
                handle.cancel()
        # Only where asked for: the library's logprobs then come one per generated token.
        tops = [{t: v} for t, v in zip(new, logprobs, strict=True)] if params.logprobs else None
        tokens.extend(new)
        out = self._book.delta(live, tokens, finish, tops)
        if finish is not None:
            del self._handles[live.key], self._tokens[live.key]
        if out is not None and params.logprobs > 0 and not _serves_logprobs(params):
            out = replace(out, top_logprobs=None)
        return out

    # -- beside the protocol -------------------------------------------------------------------
    def kv_cache_usage(self) -> float:
        """The KV pool's occupancy in percent, as the library reports it after the last step."""
        return float(self._pipe.get_metrics().cache_usage)


class SpeculativeOpenVINOEngine(OpenVINOEngine):
    """The pipeline with a drafter (engines.adapters.openvino.speculation): the same protocol,
    and the accepted drafts counted (`exercised()`; the library gives no count of drafts)."""

    CAPABILITIES = replace(OpenVINOEngine.CAPABILITIES, supported_sampling=SPECULATIVE_SAMPLING)

    def exercised(self) -> dict[str, int]:
        return {ACCEPTED: self._accepted}


# openvino-genai <= 2026.4.1 with optimum-intel <= 2.2.0's export (both the newest): the graph
# rotates with the long factors whenever max(position_ids) + 1 exceeds
# original_max_position_embeddings (ReduceMax -> Select, traced from transformers' per-call
# choice), and a continuous-batching step feeds it every scheduled token of every request as
# one position_ids; the library never recomputes a sequence's keys rotated with the short
# factors once it passes the threshold. parity and seeds fail on requests beside a longer
# one; reference_parity and prefill_decode on a sequence that passes the threshold
# (docs/findings.md report 21). Not bad_input: it re-checks the good requests' parity only
# where parity is not declared.
LONGROPE_STEP_WIDE = ("openvino-genai rotates every token of a step with the long-RoPE factors "
                      "once any scheduled position passes original_max_position_embeddings "
                      "({}), and never recomputes a sequence's cache at that threshold "
                      "(docs/findings.md report 21): tokens depend on the batch and differ "
                      "from the reference past it")
LONGROPE_FAILS = ("parity", "reference_parity", "prefill_decode", "seeds")


def known_differences(model_dir: Path, max_model_len: int) -> dict[str, str]:
    """The checks the library is known to fail on this converted model (check -> reason):
    long-RoPE ones, where a sequence can reach past the threshold."""
    original = long_rope_threshold(json.loads((model_dir / "config.json").read_text()))
    if original is None or max_model_len <= original:  # none, or no position passes it
        return {}
    return dict.fromkeys(LONGROPE_FAILS, LONGROPE_STEP_WIDE.format(original))


def openvino_genai_engine(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_batch_size: int = 8,
    max_model_len: int | None = None,
    num_kv_blocks: int | None = None,
    label: str = "openvino_genai",
    speculation: Speculation | None = None,
    precision: Mapping[str, str] = PROPERTIES,
    **options: int | bool,
) -> OpenVINOEngine:
    """An engine over a preset or checkpoint (zero arguments: the "tiny" preset); `options`
    are OpenVINOConfig fields (token budget, split-fuse, prefix caching); `speculation` a
    drafter (then a SpeculativeOpenVINOEngine); `precision` the CPU plugin's precision
    properties (f32 and an f32 KV cache by default; one left out is the plugin's default)."""
    path = openvino_dir(str(model), seed)
    max_model_len = max_model_len or preset_max_model_len(model) or 512
    if num_kv_blocks is None:  # a full batch at full length: nothing is preempted
        num_kv_blocks = max_batch_size * -(-max_model_len // BLOCK_SIZE)
    config = OpenVINOConfig(num_kv_blocks=num_kv_blocks, max_num_seqs=max_batch_size,
                            **options)  # type: ignore[arg-type]
    spec = str(model)
    vocab = PRESETS[spec].config["vocab_size"] if spec in PRESETS else _vocab_of(path)
    if speculation is not None:
        return SpeculativeOpenVINOEngine(path, config, max_model_len=max_model_len,
                                         vocab_size=int(vocab), label=label,
                                         speculation=speculation, seed=seed,
                                         precision=precision)
    return OpenVINOEngine(path, config, max_model_len=max_model_len, vocab_size=int(vocab),
                          label=label, precision=precision)


def _vocab_of(path: Path) -> int:
    return int(json.loads((path / "config.json").read_text())["vocab_size"])


# The conventional name for --engine.
make_engine = openvino_genai_engine
