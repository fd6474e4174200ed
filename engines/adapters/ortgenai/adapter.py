"""onnxruntime-genai's `Engine` (`onnxruntime-genai` 0.18.0) behind the engine protocol.

One `onnxruntime_genai.Engine` per engine, over the preset built offline as an fp32 CPU model
(engines.adapters.ortgenai.convert). A protocol request is one library `Request` with one turn
(`begin_turn(prompt, TurnOptions)`); `step()` is one `Engine.run(event buffer)`, which returns
one event per request it advanced (a token, and a finish flag with its reason). On the CPU the
model has no paged attention (the builder's `use_paged_attention` is CUDA-only), so the library
runs its static-batch scheduler: it starts a batch from the waiting requests and admits no
new one until that batch has finished.

Translations (where the library's semantics differ from the protocol):
- stop tokens: the library's turns have no stop ids (stop strings need its dynamic batching),
  so the adapter checks each token against the request's `stop_token_ids`, and on one cancels
  the turn and reports STOP with the token kept, as the protocol does.
- EOS: the library ends every turn that generates the model's EOS, drops that token from its
  events, and accepts no EOS outside the vocabulary. The built model names the last token
  (convert.eos_id). A stop there the request asked for is reported as STOP with the token; one
  it did not ask for is continued: the adapter emits the token and starts a fresh library
  request on the prompt plus every token so far, with what is left of the budget. The
  continuation is the same computation (the model's next token given that context) as the
  library's own next step would have been, by recompute.
- abort: `cancel_turn` makes the library report the turn CANCELLED later; the adapter emits
  the ABORT itself and drops that event.
- sampling: temperature, top_k and top_p map to the turn's own options; top_k off (0 or -1)
  is passed as the vocabulary size, as the library's own 0 makes its CPU sampler ignore top_p
  (docs/findings.md, report 12). A per-turn seed needs the library's dynamic batching, so
  `seed` is not supported: an unseeded request draws from the library's own RNG, and the
  suite's "seeds" check is declared an expected failure (SEEDS_UNSUPPORTED), which stops it
  drawing sampled requests anywhere.
- logprobs: the library's events carry no probabilities, so a request that asks for them gets
  `top_logprobs=None` and `logprobs=None` (the protocol's "no logprobs from this engine"):
  LOGPROBS_LIMIT.

- guided (declared by the `ortgenai_guided` variant only: the library's guidance fails on
  grammars that need a token carrying part of a character, GUIDANCE_LOSES_BYTES, report
  report 29, and then serves nothing more): the turn's guidance (`set_guidance`, llguidance
  inside the library, as in the reference; engines.adapters.ortgenai.guidance maps each
  kind). The library ends a guided
  turn with EOS at the grammar's end, forced where the text can go no further: there the
  protocol stops after the last token (no EOS in the output), elsewhere the model chose EOS
  at a full match and it is kept. Which one, llguidance says from the tokens. A guided turn
  is never continued past an EOS.
- text: the model directory carries the presets' byte-level BPE (convert.with_tokenizer), the
  engine declares it (`tokenizer`), and each output's `text` is what the library's own
  incremental detokenizer (`Tokenizer.create_stream()`) makes of its new tokens. It loses
  characters after an incomplete UTF-8 sequence (docs/findings.md report 28): the
  streamed_text check is declared an expected failure with that reason.

Declared unsupported (left out of supported_sampling, so refused by name), with the reason:
- stop strings (`stop`, `include_stop_str_in_output`): `TurnOptions.set_stop_strings` exists,
  but 0.18.0 refuses it on the CPU: "Stop strings require an Engine configured for dynamic
  batching" (paged attention, which its builder makes for CUDA only), as for seeds.
- n > 1, beam search (`n`, `beam_width`, `length_penalty`): the Engine API has none (no
  num_beams or num_return_sequences in TurnOptions or RequestOptions); only the older
  Generator API's search options have them, one generator per call outside the Engine's
  batching, so mapping them would not test the library's batching.
- lora: the Adapters API (`Adapters.load`, `Generator.set_active_adapter`) works with the
  Generator only; an Engine request has no adapter to set (RequestOptions has only
  set_max_session_tokens), so a per-request adapter cannot be served by the Engine.
- allowed_token_ids, logit_bias, bad_words: no such turn option (guidance aside); prompt
  logprobs and cache_salt: no scores of prompt positions in the events, no prefix cache on
  the CPU's static scheduler.

Not exposed by the library, so absent here (never faked): block tables (no KV introspection:
its static scheduler has no paged pool) and counts of what its scheduler did (no
`exercised()`).
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime_genai as og

from engines.adapters.common.book import Live, RequestBook
from engines.adapters.ortgenai.convert import eos_id, ortgenai_dir, with_tokenizer
from engines.adapters.ortgenai.guidance import guidance
from engines.core.guided import Grammars
from engines.models import DEFAULT_PRESET, DEFAULT_SEED, PRESETS, preset_max_model_len
from engines.protocol import Capabilities, FinishReason, Request, SamplingParams, StepOutput
from engines.threads import engine_threads
from engines.tokenizer import tokenizer_for

__all__ = [
    "LOGPROBS_LIMIT",
    "GUIDANCE_LOSES_BYTES",
    "SEEDS_UNSUPPORTED",
    "STREAM_LOSES_TEXT",
    "SUPPORTED_SAMPLING",
    "OrtGenaiEngine",
    "TurnFailed",
    "make_engine",
    "ortgenai_engine",
]

SUPPORTED_SAMPLING = frozenset({"max_tokens", "stop_token_ids", "temperature", "top_k", "top_p",
                                "logprobs", "guided"})
LOGPROBS_LIMIT = ("onnxruntime-genai's Engine events carry no probabilities: a request with "
                  "logprobs > 0 is served with top_logprobs and logprobs None")
# The library's own error for set_seed on the CPU's static scheduler; the suite then draws no
# sampled requests at all (engines.testing.checks.draws_sampling), and the strict xfail holds
# because a seeded request is refused (seed is not in SUPPORTED_SAMPLING).
SEEDS_UNSUPPORTED = ("onnxruntime-genai 0.18.0 on the CPU: 'A per-turn seed requires an Engine "
                     "configured for dynamic batching', which needs a paged-attention model, "
                     "and its builder makes those for CUDA only: seeded requests are refused "
                     "and unseeded ones draw from the library's shared RNG")
# onnxruntime-genai <= 0.18.0 (the newest): its TokenizerStream loses the characters after a
# byte that starts no complete UTF-8 character (docs/findings.md, report 28).
STREAM_LOSES_TEXT = ("onnxruntime-genai 0.18.0's TokenizerStream drops the characters that "
                     "follow an incomplete UTF-8 sequence (bytes E3 81, then ' in', streams "
                     "'in'; docs/findings.md report 28): the streamed text is not the "
                     "decode of the tokens")
# onnxruntime-genai <= 0.18.0: its guidance sees a token that carries part of a UTF-8
# character as the bytes of U+FFFD, so a grammar whose text needs such a token fails the turn
# and leaves the Engine unhealthy for every later request (docs/findings.md, report 29).
GUIDANCE_LOSES_BYTES = ("onnxruntime-genai 0.18.0's guidance sees every token that carries "
                        "part of a UTF-8 character as U+FFFD's bytes: a grammar that needs one "
                        "(choices 'é' | 'ü') fails with ENGINE_EXECUTION_FAILURE and the Engine "
                        "refuses everything after (docs/findings.md report 29)")
_EVENTS = 1024  # event buffer capacity: more than one step's events for any batch size here


class TurnFailed(RuntimeError):
    """The library reported a turn failed (an execution error, not a finish)."""


def _turn_options(req: Any, p: SamplingParams, budget: int, vocab_size: int) -> Any:
    opts = og.TurnOptions(req)
    opts.set_max_generated_tokens(int(budget))
    if p.guided is not None:
        opts.set_guidance(*guidance(p.guided))
    # top_k 1 keeps the most likely token whatever the temperature, and onnxruntime-genai
    # 0.18.0 refuses a temperature beside it ("the resolved turn policy selects the top
    # logit"): served greedily, the same tokens.
    if p.temperature > 0 and p.top_k != 1:
        opts.set_do_sample(True)
        opts.set_temperature(float(p.temperature))
        # Set both always: the built config's search defaults include top_k 50. "Off" is the
        # whole vocabulary, not the library's 0: with top_k 0 its CPU sampler ignores top_p
        # (docs/findings.md, report 12); keeping every token is the same filter.
        opts.set_top_k(int(p.top_k) if p.top_k > 0 else vocab_size)
        opts.set_top_p(float(p.top_p))
    else:
        opts.set_do_sample(False)
    return opts


class _Turn:
    """One library request serving one of ours (a continuation gets a new one)."""

    __slots__ = ("live", "req", "turn", "tokens", "stream", "text")

    def __init__(self, live: Live, req: Any, turn: int, tokens: list[int], stream: Any) -> None:
        self.live, self.req, self.turn, self.tokens = live, req, turn, tokens
        # The library's incremental detokenizer (kept across a continuation), and how many
        # of the tokens it has been given.
        self.stream, self.text = stream, 0


# The builder's precisions (its -p, with -e cpu) as (Capabilities.dtype, kv_cache_dtype):
# fp16 makes fp16 weights, activations and KV cache; int4 quantizes the matrix weights
# (MatMulNBits) and keeps fp32 activations and KV cache. tests/adapters/ortgenai reads them
# back from the built model.onnx.
PRECISIONS: dict[str, tuple[str, str]] = {
    "fp32": ("float32", "float32"), "fp16": ("float16", "float16"), "int4": ("int4", "float32"),
}


class OrtGenaiEngine:
    """One `onnxruntime_genai.Engine`, run from the caller's thread."""

    def __init__(self, model_dir: str | Path, *, max_batch_size: int | None, max_model_len: int,
                 vocab_size: int, tokenizer: str | None = None, guided: bool = False,
                 label: str = "onnxruntime_genai", precision: str = "fp32") -> None:
        self.label = label
        self.dtype, self.kv_cache_dtype = PRECISIONS[precision]
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.eos_token_id = eos_id(vocab_size)
        failures = {"seeds": SEEDS_UNSUPPORTED}  # Capabilities.expected_failed_checks
        if tokenizer is not None:
            failures["streamed_text"] = STREAM_LOSES_TEXT
        config = og.Config(str(model_dir))
        # The threads this process may use (taskset) or the bench's --threads
        # (engines.threads), not onnxruntime's default of every core: a stated count, as the
        # OpenVINO GenAI and CTranslate2 adapters give their libraries.
        self.compute_threads = engine_threads()
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": self.compute_threads}}}}))
        if max_batch_size is not None:
            config.overlay(json.dumps(
                {"engine": {"static_batching": {"max_batch_size": int(max_batch_size)}}}))
        model = og.Model(config)
        self._engine = og.Engine(model)
        self._tokenizer = og.Tokenizer(model) if tokenizer is not None else None
        self._grammars = Grammars(tokenizer, vocab_size) if tokenizer is not None else None
        self._capabilities = Capabilities(
            # Guidance needs the tokenizer that gives the grammar its meaning.
            supported_sampling=(SUPPORTED_SAMPLING if tokenizer is not None and guided
                                else SUPPORTED_SAMPLING - {"guided"}),
            expected_failed_checks=failures,
            # What the library says it is configured for (see docs/findings.md on whether
            # its scheduler keeps to it).
            max_concurrency=int(self._engine.get_capabilities().configured_max_batch_size),
            # The directory of the tokenizer the model directory carries (with_tokenizer):
            # text, guidance and the suite's decode all read the same one.
            tokenizer=tokenizer, dtype=self.dtype, kv_cache_dtype=self.kv_cache_dtype)
        self._buffer = self._engine.create_event_buffer(_EVENTS)
        self._book = RequestBook()
        self._turns: dict[str, _Turn] = {}  # our key -> its current library request
        self._by_req: dict[int, _Turn] = {}  # id(library request) -> its turn
        self._cancelled: dict[int, Any] = {}  # cancelled, their CANCELLED event still to come

    # -- the protocol --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities), and the precision the builder made
        its model at (PRECISIONS: float32 by default)."""
        return self._capabilities

    def add_request(self, request: Request) -> None:
        key = self._book.add(request, vocab_size=self.vocab_size,
                             max_model_len=self.max_model_len,
                             supported=self._capabilities.supported_sampling)
        live = self._book.get(key)
        assert live is not None
        try:
            if request.params.guided is not None:  # InvalidRequest naming a bad spec
                assert self._grammars is not None
                self._grammars.matcher(request.params.guided)
            self._begin(live, list(request.prompt_token_ids), [], self._stream())
        except BaseException:
            self._book.discard(request.request_id)
            raise

    def _stream(self) -> Any:
        return None if self._tokenizer is None else self._tokenizer.create_stream()

    def _begin(self, live: Live, context: list[int], tokens: list[int], stream: Any) -> None:
        req = self._engine.create_request()
        budget = live.request.params.max_tokens - len(tokens)
        turn = req.begin_turn(np.array(context, dtype=np.int32),
                              _turn_options(req, live.request.params, budget,
                                            self.vocab_size))
        t = _Turn(live, req, int(turn), tokens, stream)
        self._turns[live.key] = t
        self._by_req[id(req)] = t

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            self._cancel(self._turns.pop(key))

    def _cancel(self, t: _Turn) -> None:
        del self._by_req[id(t.req)]
        if t.req.cancel_turn(t.turn):  # False: it had already finished in the library
            self._cancelled[id(t.req)] = t.req
        else:
            t.req.close()

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if not self._engine.has_pending_requests():
            if self._book.live():  # the caller would wait forever for their tokens
                ids = [live.request.request_id for live in self._book.live()]
                raise TurnFailed(f"onnxruntime-genai has nothing pending but requests {ids!r} "
                                 "are unfinished")
            return outputs
        finished: dict[str, FinishReason] = {}
        touched: dict[str, _Turn] = {}
        continued: list[_Turn] = []
        for ev in self._engine.run(self._buffer):
            t = self._by_req.get(id(ev.request))
            if t is None:  # a turn we cancelled: its CANCELLED event closes it
                req = self._cancelled.pop(id(ev.request), None)
                if req is not None and ev.flags & og.EngineEventFlags.TURN_FINISHED:
                    req.close()
                continue
            key = t.live.key
            if key in finished:
                continue
            touched[key] = t
            reason = self._event(t, ev)
            if reason == "continue":
                continued.append(t)
            elif isinstance(reason, FinishReason):
                finished[key] = reason
        for t in continued:  # a fresh library request goes on from all the tokens so far
            self._forget(t)
            context = [*t.live.request.prompt_token_ids, *t.tokens]
            self._begin(t.live, context, t.tokens, t.stream)
        for key, t in touched.items():
            finish = finished.get(key)
            if finish is not None:
                self._forget(t)
                del self._turns[key]
            out = self._book.delta(t.live, t.tokens, finish)
            if out is not None:
                if t.live.request.params.logprobs > 0:
                    out = replace(out, top_logprobs=None, logprobs=None)
                if t.stream is not None:
                    out = replace(out, text=self._text(t))
                outputs.append(out)
        return outputs

    def _text(self, t: _Turn) -> str:
        """What the library's detokenizer makes of the tokens it has not seen, the EOS the
        adapter adds aside (the protocol's text skips special tokens; the library never
        emitted it)."""
        new = t.tokens[t.text:]
        t.text = len(t.tokens)
        return "".join(t.stream.decode(tok) for tok in new if tok != self.eos_token_id)

    def _event(self, t: _Turn, ev: Any) -> FinishReason | str | None:
        """Apply one event to its turn: a finish reason, "continue", or None (going on)."""
        params = t.live.request.params
        flags = ev.flags
        if flags & og.EngineEventFlags.FAILED or ev.finish_reason == og.FinishReason.FAILED:
            raise TurnFailed(f"onnxruntime-genai failed request {t.live.request.request_id!r}: "
                             f"{ev.error_code.name}")
        done = bool(flags & og.EngineEventFlags.TURN_FINISHED)
        if flags & og.EngineEventFlags.TOKEN and ev.token is not None:
            t.tokens.append(int(ev.token))
            if int(ev.token) in params.stop_token_ids:
                if not done:
                    self._cancel(t)
                return FinishReason.STOP
        if not done:
            return None
        if ev.finish_reason == og.FinishReason.EOS and params.guided is not None:
            # The grammar's end: the library ends a guided turn at EOS, which it forces where
            # the text can go no further; the protocol stops there, after the last token.
            if not self._grammar_done(params, t.tokens):
                t.tokens.append(self.eos_token_id)  # the model chose EOS at a full match
            return FinishReason.STOP
        if ev.finish_reason == og.FinishReason.EOS:  # its EOS token is not in the event
            t.tokens.append(self.eos_token_id)
            if self.eos_token_id in params.stop_token_ids:
                return FinishReason.STOP
            if len(t.tokens) < params.max_tokens:
                return "continue"
            return FinishReason.LENGTH
        if ev.finish_reason == og.FinishReason.MAX_GENERATED_TOKENS:
            return FinishReason.LENGTH
        raise TurnFailed(f"onnxruntime-genai ended request {t.live.request.request_id!r} with "
                         f"{ev.finish_reason.name} after {len(t.tokens)} tokens, unasked")

    def _grammar_done(self, params: SamplingParams, tokens: list[int]) -> bool:
        """Whether the guided text of `tokens` can go no further (llguidance, the library
        the reference and onnxruntime-genai's guidance both use)."""
        assert self._grammars is not None and params.guided is not None
        matcher = self._grammars.matcher(params.guided)
        return any(matcher.advance(tok) for tok in tokens)

    def _forget(self, t: _Turn) -> None:
        """Drop a library request that finished (or was cancelled by _cancel already)."""
        if self._by_req.pop(id(t.req), None) is not None:
            t.req.close()


def ortgenai_engine(
    model: str | Path = DEFAULT_PRESET,
    *,
    seed: int = DEFAULT_SEED,
    max_batch_size: int | None = None,
    max_model_len: int | None = None,
    guided: bool = False,
    label: str = "onnxruntime_genai",
    precision: str = "fp32",
) -> OrtGenaiEngine:
    """An engine over a preset or checkpoint (zero arguments: the "tiny" preset, the library's
    default batch size); `max_batch_size` is written to `engine.static_batching`. `guided`:
    declare guided decoding, mapped to the library's guidance, which fails on grammars that
    need a token carrying part of a character (GUIDANCE_LOSES_BYTES): off by default, on in
    engines.adapters.ortgenai.variants:ortgenai_guided. `precision`: the builder's (PRECISIONS).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r}; expected one of {', '.join(PRECISIONS)}")
    path = ortgenai_dir(str(model), seed, precision)
    spec = str(model)
    vocab = int(PRESETS[spec].config["vocab_size"] if spec in PRESETS else _vocab_of(path))
    # The presets' byte-level BPE, whose last id is the EOS the built config names (eos_id).
    tokenizer = tokenizer_for(vocab)
    return OrtGenaiEngine(with_tokenizer(path, tokenizer), max_batch_size=max_batch_size,
                          max_model_len=max_model_len or preset_max_model_len(model) or 512,
                          vocab_size=vocab, tokenizer=tokenizer, guided=guided, label=label,
                          precision=precision)


def _vocab_of(path: Path) -> int:
    return int(json.loads((path / "genai_config.json").read_text())["model"]["vocab_size"])


# The conventional name for --engine.
make_engine = ortgenai_engine
