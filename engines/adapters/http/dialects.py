"""What differs between servers: the endpoint, the request body, the streamed events, the
finish reasons, what the server says about its limits, and which SamplingParams it honours.

A dialect is a small profile (`Dialect`); the adapter (engines.adapters.http.adapter) does the
rest the same way for every server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engines.adapters.http.metrics import samples
from engines.protocol import BASE_PARAMS, PROCESSING_PARAMS, FinishReason, Load, Request

__all__ = ["DIALECTS", "Dialect", "Event", "LlamaServer", "OpenAICompletions", "StreamedError",
           "dialect_named", "llama_counters", "llama_load", "vllm_counters",
           "vllm_load"]


@dataclass(frozen=True, slots=True)
class Event:
    """One streamed message, in the protocol's terms."""

    token_ids: tuple[int, ...]  # new tokens in this message
    finish: FinishReason | None = None
    top_logprobs: tuple[Mapping[int, float], ...] | None = None  # one per new token
    logprobs: tuple[float, ...] | None = None  # the sampled tokens' own, one per new token
    # The prompt tokens the server took from its prefix cache for this request (its own
    # count: StepOutput.cached_prompt_tokens), where this message carries it.
    cached: int | None = None
    text: str | None = None  # the text these tokens add, where the dialect reads it
    stop_word: str = ""  # the stop string that ended the request, cut out of `text`


class StreamedError(Exception):
    """An error message in the stream itself, after a 200 status (its `error` object)."""

    def __init__(self, error: object) -> None:
        self.error = error
        message = error.get("message", error) if isinstance(error, Mapping) else error
        self.code = error.get("code") if isinstance(error, Mapping) else None
        super().__init__(str(message))


class Dialect(Protocol):
    name: str
    path: str  # the streaming completion endpoint
    health_path: str
    supported_sampling: frozenset[str]
    logprobs_of: str  # what its top logprobs are of (Capabilities.logprobs_of)
    min_temperature: float  # the lowest temperature its server samples at (Capabilities')
    # The optional StepOutput fields its events can fill (Capabilities.output_fields).
    output_fields: frozenset[str]
    # The count of cached prompt tokens comes in a message after the finishing one (OpenAI's
    # trailing usage message): the adapter holds a finished request's last output until it.
    usage_trails: bool

    def body(self, request: Request, model: str | None) -> dict[str, Any]: ...

    def event(self, data: Mapping[str, Any]) -> Event | None: ...  # None: nothing for us

    def limits(self, get: Any) -> dict[str, Any]: ...  # from the server's own endpoints

    # The server's own count of its load (engines.protocol.Load), from its endpoints:
    # `get_text(path)` is the body of GET path (an error raises). None: this server does not
    # say (then the adapter has no LoadIntrospection and the drain check skips, saying so).
    def load(self, get_text: Callable[[str], str], source: str) -> Load | None: ...

    # What the server's features did, cumulative (engines.protocol.Exercised's names, e.g.
    # preemptions, prefix_cache_hit_tokens); None: it does not say. Same `get_text`.
    def counters(self, get_text: Callable[[str], str]) -> dict[str, int] | None: ...


# vLLM's Prometheus gauges, one sample per engine of a data-parallel server.
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the newer name first


def vllm_load(text: str, source: str) -> Load | None:
    """A Load from vLLM's /metrics text; None where its request gauges are absent (SGLang,
    TGI: their gauges have other names and meanings, not mapped here)."""
    found = samples(text)
    if VLLM_RUNNING not in found or VLLM_WAITING not in found:
        return None
    kv = next((found[name] for name in VLLM_KV if name in found), None)
    # Usage is a fraction per engine (evictable prefix-cache blocks count free); the mean
    # over engines is the fraction of their pooled blocks where the pools are equal.
    return Load(running=round(sum(found[VLLM_RUNNING])),
                waiting=round(sum(found[VLLM_WAITING])),
                kv_usage=sum(kv) / len(kv) if kv else None, source=source)


# llama-server's gauges (/metrics, with --metrics): slots processing a request, and requests
# deferred for want of a free slot. It reports no KV usage: a slot's cells are its context,
# and what a finished request leaves in its slot is prompt cache, free by the Load contract.
LLAMA_RUNNING = "llamacpp:requests_processing"
LLAMA_WAITING = "llamacpp:requests_deferred"


# Prompt tokens a slot reused from its cache (cache_prompt), as Exercised's prefix-cache hits.
LLAMA_CACHED = "llamacpp:prompt_tokens_cached_total"
# Speculative decoding's draft tokens and, of those, the accepted ones (Exercised's names),
# counted by the server when a request's slot finishes; present in builds that speculate.
LLAMA_SPEC = {"llamacpp:spec_decode_num_draft_tokens_total": "spec_draft_tokens",
              "llamacpp:spec_decode_num_accepted_tokens_total": "spec_accepted_tokens"}


def llama_counters(text: str, *, speculative: bool = False) -> dict[str, int] | None:
    """Prefix-cache hit tokens so far from llama-server's /metrics text (and, for a server
    launched to speculate, its draft and accepted tokens); None where absent. A server that
    does not speculate reports zeros for drafts: not passed on, as Exercised's counters are
    absent where a feature is, never zero."""
    found = samples(text)
    if LLAMA_CACHED not in found:
        return None
    out = {"prefix_cache_hit_tokens": round(sum(found[LLAMA_CACHED]))}
    if speculative:
        out.update({ours: round(sum(found[name])) for name, ours in LLAMA_SPEC.items()
                    if name in found})
    return out


def llama_load(text: str, source: str) -> Load | None:
    """A Load from llama-server's /metrics text (kv_usage None: not reported); None where
    its request gauges are absent."""
    found = samples(text)
    if LLAMA_RUNNING not in found or LLAMA_WAITING not in found:
        return None
    return Load(running=round(sum(found[LLAMA_RUNNING])),
                waiting=round(sum(found[LLAMA_WAITING])), source=source)


def _token_id(key: str) -> int:
    # vLLM's return_tokens_as_token_ids renders a token as "token_id:<id>".
    return int(key.rpartition(":")[2])


# vLLM's Prometheus counters (exposed with `_total`) -> engines.protocol.Exercised's names.
VLLM_COUNTERS = {"vllm:num_preemptions_total": "preemptions",
                 "vllm:prefix_cache_hits_total": "prefix_cache_hit_tokens"}


def vllm_counters(text: str) -> dict[str, int] | None:
    """Preemptions and prefix-cache hit tokens so far from vLLM's /metrics text (summed over
    engines); None where neither is there."""
    found = samples(text)
    out = {ours: round(sum(found[name])) for name, ours in VLLM_COUNTERS.items()
           if name in found}
    return out or None


class OpenAICompletions:
    """`POST /v1/completions` with the prompt as token ids, streamed (vLLM; SGLang and TGI
    take the same body, minus the extras they lack). Sampling beyond OpenAI's own fields is
    sent as vLLM's extra parameters (top_k, min_p, repetition_penalty, min_tokens,
    ignore_eos, stop_token_ids, return_token_ids, return_tokens_as_token_ids)."""

    name = "openai"
    path = "/v1/completions"
    health_path = "/health"
    # vLLM has every field; its logprobs are of the raw distribution by default. Of wave 4's,
    # the two that OpenAI's body carries as token ids: allowed_token_ids (vLLM's extra) and
    # logit_bias. Not bad_words (vLLM's server takes strings and tokenizes them, with a
    # space-prefixed variant: not the protocol's token sequences), nor guided, stop strings
    # or text (the server's checkpoint carries the word-level tokenizer, whose text is no
    # BPE's), nor n, prompt_logprobs (one stream per request here).
    supported_sampling = BASE_PARAMS | PROCESSING_PARAMS | {"allowed_token_ids", "logit_bias"}
    logprobs_of = "raw"
    # vLLM raises a temperature below 0.01 to 0.01 (its SamplingParams, with a warning):
    # declared (Capabilities.min_temperature), so no lower one is judged as if served. Another
    # OpenAI server is then judged from 0.01 up too: less reach, no false alarm.
    min_temperature = 0.01
    # usage.prompt_tokens_details.cached_tokens of the trailing usage message (stream_options
    # include_usage); vLLM sends it with --enable-prompt-tokens-details, counted when the
    # request was first scheduled. A server that does not send it leaves the count None.
    output_fields = frozenset({"cached_prompt_tokens"})
    usage_trails = True

    def body(self, request: Request, model: str | None) -> dict[str, Any]:
        p = request.params
        body: dict[str, Any] = {
            "prompt": [int(t) for t in request.prompt_token_ids],
            "max_tokens": int(p.max_tokens),
            "temperature": float(p.temperature),
            "stream": True,
            "return_token_ids": True,
            # The checkpoint's EOS is no stop token of ours: only stop_token_ids stop.
            "ignore_eos": True,
            "stop_token_ids": [int(t) for t in p.stop_token_ids],
            "top_k": int(p.top_k),
            "top_p": float(p.top_p),
            "min_p": float(p.min_p),
            "repetition_penalty": float(p.repetition_penalty),
            "presence_penalty": float(p.presence_penalty),
            "frequency_penalty": float(p.frequency_penalty),
            "min_tokens": int(p.min_tokens),
            "stream_options": {"include_usage": True},
        }
        if model is not None:
            body["model"] = model
        if p.seed is not None:
            body["seed"] = int(p.seed)
        if p.logprobs > 0:
            body["logprobs"] = int(p.logprobs)
            body["return_tokens_as_token_ids"] = True
        if p.allowed_token_ids is not None:
            body["allowed_token_ids"] = [int(t) for t in p.allowed_token_ids]
        if p.logit_bias:  # OpenAI's map: token id (a string key) -> bias
            body["logit_bias"] = {str(int(t)): float(b) for t, b in p.logit_bias}
        return body

    def event(self, data: Mapping[str, Any]) -> Event | None:
        if "error" in data:  # vLLM streams its engine-side refusals after a 200
            raise StreamedError(data["error"])
        choices = data.get("choices") or ()
        if not choices:  # a usage-only message: the count of cached prompt tokens, if any
            details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens")
            return Event((), cached=None if cached is None else int(cached))
        choice = choices[0]
        if "token_ids" not in choice and choice.get("text"):
            # SGLang's and TGI's /v1/completions answer with text only: nothing to compare.
            raise ValueError("token_ids: absent beside text: this server does not return "
                             "token ids from /v1/completions (vLLM's return_token_ids)")
        tokens = tuple(int(t) for t in choice.get("token_ids") or ())
        finish = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH,
                  "abort": FinishReason.ABORT}.get(choice.get("finish_reason") or "")
        if choice.get("finish_reason") and finish is None:
            raise ValueError(f"finish_reason: {choice['finish_reason']!r} is not one the "
                             "openai dialect knows (stop, length, abort)")
        tops = sampled = None
        lp = choice.get("logprobs")
        if lp and tokens:
            tops = tuple({_token_id(k): float(v) for k, v in (m or {}).items()}
                         for m in lp.get("top_logprobs") or ())
            sampled = tuple(float(v) for v in lp.get("token_logprobs") or ())
            if len(tops) != len(tokens) or len(sampled) != len(tokens):
                raise ValueError(f"logprobs: {len(tops)} top and {len(sampled)} sampled "
                                 f"entries for {len(tokens)} tokens in one message")
        return Event(tokens, finish, tops, sampled)

    def limits(self, get: Any) -> dict[str, Any]:
        models = get("/v1/models").get("data") or []
        if not models:
            return {}
        first = models[0]
        found: dict[str, Any] = {"model": first.get("id")}
        if first.get("max_model_len"):  # vLLM's extension of the model card
            found["max_model_len"] = int(first["max_model_len"])
        return found

    def load(self, get_text: Callable[[str], str], source: str) -> Load | None:
        return vllm_load(get_text("/metrics"), source + "/metrics")

    def counters(self, get_text: Callable[[str], str]) -> dict[str, int] | None:
        return vllm_counters(get_text("/metrics"))


class LlamaServer:
    """llama.cpp's `POST /completion` with the prompt as token ids, streamed. Checked against
    llama-server built from llama.cpp 0c1e57098 (llama-cpp-python 0.3.36's vendored copy;
    ci/llama-server-env.sh): tokens come one per partial message; the final message
    (`stop: true`, its `stop_type`) carries none; `n_probs` gives `completion_probabilities`
    with each token's `logprob` and its `top_logprobs`, of the raw distribution (the softmax
    of the logits; `post_sampling_probs`, not sent, would give them after the sampler chain).

    llama-server has no stop token ids (its stops are strings): the adapter applies
    stop_token_ids itself (`client_stops`), finishing the request at the first stop id that
    arrives and closing its stream. min_tokens has no llama-server field: not declared.
    Nor are presence_penalty and frequency_penalty: llama.cpp counts the prompt's tokens in
    them (its penalty window is the last `repeat_last_n` tokens of the whole context), where
    the protocol, as OpenAI and vLLM, counts the generated ones only; its repeat_penalty
    counts prompt and output as the protocol's repetition_penalty does, over the whole
    request with `repeat_last_n` set to its length (the default window is 64 tokens).

    cache_prompt: whether a slot may reuse the KV of its previous prompt's common prefix
    (dialect "llama-cache-prompt"); off in "llama", so nothing carries over between requests.

    Constraints: `logit_bias` is llama.cpp's own, the first sampler of its chain (added to
    the raw logit, before penalties and temperature, as the protocol orders it); given the
    vocabulary size (`vocab_size`), `allowed_token_ids` is a bias of -inf (llama.cpp's
    `false`) on every other id. bad_words has no llama-server field (its nearest, a banned
    token, is a one-token word only): not declared. `loras`: adapter name -> its id on this
    server (launched with each at scale 0): a request's `lora` sends that adapter at scale 1
    and every other at 0; a base request sends none. llama-server has no cache salt: not
    declared.
    `speculative`: the server was launched to speculate (a draft model or an n-gram mode),
    so its draft counters are passed on as Exercised's.
    `guided`: the server's GGUF has the presets' BPE vocabulary with a real EOS (its last id),
    and `guided` is declared: a guided request is sent as `grammar` or `json_schema`
    (engines.adapters.http.llama_guided) with `ignore_eos` off, and its grammar's EOS ends it
    (`stop_type` "eos", finish STOP, the EOS its last token).
    """

    path = "/completion"
    health_path = "/health"
    supported_sampling = frozenset({
        "max_tokens", "stop_token_ids", "temperature", "seed", "logprobs", "top_k", "top_p",
        "min_p", "repetition_penalty"})
    logprobs_of = "raw"
    min_temperature = 0.0  # llama.cpp divides by any temperature above 0
    client_stops = True  # the adapter applies stop_token_ids (see above)
    # timings.cache_n: the prompt tokens the slot reused from its cache (cache_prompt), on
    # every message with timings_per_token (so on the first, before any client stop).
    output_fields = frozenset({"cached_prompt_tokens"})
    usage_trails = False

    def __init__(self, *, cache_prompt: bool = False, vocab_size: int | None = None,
                 loras: Mapping[str, int] | None = None, speculative: bool = False,
                 children: bool = False, explicit_base: bool = False,
                 name: str | None = None, guided: bool = False) -> None:
        self.cache_prompt = cache_prompt
        self.explicit_base = explicit_base
        self.name = name or ("llama-cache-prompt" if cache_prompt else "llama")
        self.vocab_size = vocab_size
        self.loras = dict(loras or {})
        self.speculative = speculative
        self.guided = guided
        # Unstreamed for the BPE vocabulary: llama-server streams no message for a token whose
        # text ends in a cut UTF-8 character (it holds the text back), and so never sends that
        # token's id (docs/findings.md, report 43); its unstreamed response has them all.
        self.stream = not guided
        fields = set(LlamaServer.supported_sampling) | {"logit_bias"}
        if guided:
            # Not logprobs: llama-server drops the probabilities of a token whose text ends in
            # a cut UTF-8 character, streamed or not (docs/findings.md, report 43), and
            # the BPE vocabulary's tokens often do.
            fields.add("guided")
            fields.discard("logprobs")
            # Stop strings, with the text (unstreamed: one piece, the server's `content`).
            fields |= {"stop", "include_stop_str_in_output"}
        if vocab_size is not None:
            fields.add("allowed_token_ids")
        if self.loras:
            fields.add("lora")
        # n > 1 as llama-server's n_cmpl: its children stream over the request's one
        # response, each message naming its child (`index`); an adapter that keeps a stream
        # per child (engines.adapters.http.llama_variants.LlamaEngine) declares it.
        if children:
            fields.add("n")
        self.supported_sampling = frozenset(fields)

    def body(self, request: Request, model: str | None) -> dict[str, Any]:
        p = request.params
        body: dict[str, Any] = {
            "prompt": [int(t) for t in request.prompt_token_ids],
            "n_predict": int(p.max_tokens),
            "temperature": float(p.temperature),
            "stream": self.stream,
            "return_tokens": True,
            "cache_prompt": self.cache_prompt,
            "ignore_eos": True,
            "top_k": int(p.top_k),
            "top_p": float(p.top_p),
            "min_p": float(p.min_p),
            "repeat_penalty": float(p.repetition_penalty),
            # The request's whole context, as the protocol's repetition_penalty (this server
            # refuses llama.cpp's -1 for "the context"; its default is 64 tokens).
            "repeat_last_n": len(request.prompt_token_ids) + int(p.max_tokens),
            "timings_per_token": True,
        }
        if p.stop:
            body["stop"] = list(p.stop)
        if p.guided is not None:
            from engines.adapters.http.llama_guided import guided_fields

            # Its grammar ends on the EOS, which ignore_eos would ban (llama_guided).
            body.update(guided_fields(p.guided), ignore_eos=False)
        if p.seed is not None:
            body["seed"] = int(p.seed)
        if p.logprobs > 0:
            body["n_probs"] = int(p.logprobs)
        if p.n > 1:
            body["n_cmpl"] = int(p.n)
        bias = self._bias(request)
        if bias:
            body["logit_bias"] = bias
        if request.lora is not None or (self.explicit_base and self.loras):
            # The named adapter at scale 1 and every other listed at 0 (the server's default
            # for one left out, said here rather than relied on). A base request sends no
            # `lora`, as a client that knows nothing of adapters does: the server then runs
            # its launch-time scales, all 0; with `explicit_base` it lists every adapter at
            # 0, the one form after which the server does not reuse a slot's prompt KV
            # computed under an adapter (docs/findings.md report 36).
            body["lora"] = [{"id": i, "scale": 1.0 if name == request.lora else 0.0}
                            for name, i in sorted(self.loras.items(), key=lambda kv: kv[1])]
        return body

    def _bias(self, request: Request) -> list[list[Any]]:
        """llama-server's logit_bias pairs: the request's biases, and `false` (-inf) on every
        id allowed_token_ids leaves out."""
        p = request.params
        out: list[list[Any]] = [[int(t), float(b)] for t, b in p.logit_bias]
        if p.allowed_token_ids is not None:
            if self.vocab_size is None:  # not declared: check_request refused it already
                raise ValueError("allowed_token_ids: the llama dialect needs vocab_size")
            allowed = set(p.allowed_token_ids)
            out += [[t, False] for t in range(self.vocab_size) if t not in allowed]
        return out

    def event(self, data: Mapping[str, Any]) -> Event | None:
        if "error" in data:
            raise StreamedError(data["error"])
        tokens = tuple(int(t) for t in data.get("tokens") or ())
        finish = None
        if data.get("stop"):
            kind = data.get("stop_type") or "none"
            if kind == "eos" and self.guided:  # only a guided request runs without ignore_eos
                finish = FinishReason.STOP
            elif kind == "word" and self.guided:  # a stop string (only this dialect sends them)
                finish = FinishReason.STOP
            elif kind != "limit":
                raise ValueError(f"stop_type: {kind!r}: llama-server stopped on its own "
                                 "(eos, a stop word, or none: cut short), which the adapter "
                                 "never asks for")
            else:
                finish = FinishReason.LENGTH
        tops = sampled = None
        probs = data.get("completion_probabilities")
        if probs and tokens:
            tops = tuple({int(e["id"]): float(e["logprob"]) for e in p.get("top_logprobs") or ()}
                         for p in probs)
            sampled = tuple(float(p["logprob"]) for p in probs)
            if len(tops) != len(tokens):
                raise ValueError(f"completion_probabilities: {len(tops)} entries for "
                                 f"{len(tokens)} tokens in one message")
        cached = (data.get("timings") or {}).get("cache_n")
        count = None if cached is None else int(cached)
        if self.stream or finish is None:
            return Event(tokens, finish, tops, sampled, count)
        # Unstreamed: the whole text, cut before a stop string (which the adapter appends
        # under include_stop_str_in_output, for which llama-server has no field).
        return Event(tokens, finish, tops, sampled, count, str(data.get("content") or ""),
                     str(data.get("stopping_word") or ""))

    def limits(self, get: Any) -> dict[str, Any]:
        props = get("/props")
        found: dict[str, Any] = {}
        settings = props.get("default_generation_settings") or {}
        if settings.get("n_ctx"):
            found["max_model_len"] = int(settings["n_ctx"])
        if props.get("total_slots"):
            found["max_concurrency"] = int(props["total_slots"])
        return found

    def load(self, get_text: Callable[[str], str], source: str) -> Load | None:
        return llama_load(get_text("/metrics"), source + "/metrics")

    def counters(self, get_text: Callable[[str], str]) -> dict[str, int] | None:
        return llama_counters(get_text("/metrics"), speculative=self.speculative)


DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    OpenAICompletions(), LlamaServer(), LlamaServer(cache_prompt=True))}


def dialect_named(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"dialect: {name!r} is not one of {sorted(DIALECTS)}") from None
