"""llama-server configurations of wave 4, each a zero-argument factory for `--engine
engines.adapters.http.llama_variants:FACTORY` (or `--engine-variant NAME=...`), on the tiny
preset and compared with the sequential reference on the same weights (the plain ones are in
engines.adapters.http.variants):

- speculative decoding: a draft model (`-md`: the `tiny-draft` preset, the tiny preset's
  first two layers, converted like the target) and llama.cpp's n-gram drafters
  (`--spec-type ngram-simple`, `ngram-mod`), each with lookups short enough that the
  tiny model's repetitive output makes drafts hit; the server's draft and accepted tokens
  are the adapter's Exercised counters;
- LoRA: the tiny preset's first zoo adapters (engines.loras), converted to GGUF LoRA and
  loaded at scale 0 (`--lora-scaled FILE:0`); a request's `lora` names one, and the adapter
  declares `loras` (name -> PEFT directory, what the reference loads);
- n > 1 as llama-server's `n_cmpl` (`llama_server_n`);
- guided decoding (`llama_server_guided`): the tiny preset's GGUF with the presets' BPE
  vocabulary and its EOS, grammars as `grammar` / `json_schema`
  (engines.adapters.http.llama_guided);
- deployment precision (`llama_server_f16`, `llama_server_q8_0`): the GGUF at F16 or Q8_0
  over the server's own default KV cache (F16) and flash attention (auto), each declaring
  what it runs at (Capabilities.dtype, kv_cache_dtype), so that `--parity=auto` judges it
  tie-aware; compared with engines.sequential:sequential_fp16 (F16) or the fp32
  SequentialEngine (Q8_0: no reference computes in int8).

The adapter over each is engines.adapters.http.llama_engine.LlamaEngine.

Every configuration launches its own server once per process (engines.adapters.http.servers).
"""

from __future__ import annotations

from collections.abc import Mapping

from engines.adapters.http.convert import gguf_model
from engines.adapters.http.dialects import LlamaServer
from engines.adapters.http.launch import Server
from engines.adapters.http.llama_engine import LlamaEngine
from engines.adapters.http.servers import llama_server_binary, llama_server_process

__all__ = ["CACHE_DTYPES", "DEPLOYED_CACHE", "GUIDED_ENDS", "LORAS", "SPEC_LOGPROBS",
           "WEIGHT_DTYPES", "LlamaEngine", "llama_server_draft", "llama_server_f16",
           "llama_server_guided", "llama_server_lora", "llama_server_lora_cache_prompt",
           "llama_server_deployed", "llama_server_n", "llama_server_ngram_mod",
           "llama_server_ngram_simple", "llama_server_q8_0"]

PRESET = "tiny"
DRAFT_PRESET = "tiny-draft"
LORAS = 3  # zoo adapters a LoRA server loads (ranks 8, 4, 8)
# Draft tokens a step proposes: enough for a run of several accepted tokens, few enough that
# a rejection early in the run is common too.
DRAFT_MAX = 4


# What the speculating configurations get wrong, declared (strict: a fix is noticed).
SPEC_LOGPROBS = ("llama-server sends no completion_probabilities for the tokens of a "
                 "speculative step (every token after a slot's first, while it drafts), "
                 "accepted drafts or not (llama.cpp PR 27196, open; docs/findings.md report 34)")


def _vocab() -> int:
    from engines.models import PRESETS

    return int(PRESETS[PRESET].config["vocab_size"])


def _engine(server: Server, *, cache_prompt: bool = False, speculative: bool = False,
            loras: Mapping[str, str] | None = None, name: str) -> LlamaEngine:
    ids = {n: i for i, n in enumerate(loras or {})}  # --lora flags' order
    # With cache_prompt, a base request names every adapter at scale 0 (report 36: without a
    # `lora` list the server reuses prompt KV an adapter computed).
    dialect = LlamaServer(cache_prompt=cache_prompt, vocab_size=_vocab(), loras=ids,
                          speculative=speculative, explicit_base=cache_prompt, name=name)
    known = {"logprobs": SPEC_LOGPROBS} if speculative else {}
    return LlamaEngine(server.url, vocab_size=_vocab(), dialect=dialect, loras=loras,
                       known_failures=known, log=str(server.log))


def _draft_args() -> tuple[str, ...]:
    draft = gguf_model(DRAFT_PRESET, binary=llama_server_binary())
    # `--spec-type draft-simple` said: this build infers a type for `-md` only from a
    # draft GGUF's own metadata, and otherwise loads the draft and speculates not at all
    # (logged at info level only). The draft's KV in F32 as the target's (its default is
    # F16); one thread, as the target.
    return ("-md", str(draft), "--spec-type", "draft-simple",
            "--spec-draft-n-max", str(DRAFT_MAX),
            "--spec-draft-type-k", "f32", "--spec-draft-type-v", "f32", "-td", "1")


def llama_server_n() -> LlamaEngine:
    """llama-server on the tiny preset (4 slots, cache_prompt off) declaring n > 1 (its
    n_cmpl, at most the slots: the suite draws 2 to 4 children)."""
    server = llama_server_process(PRESET)
    dialect = LlamaServer(vocab_size=_vocab(), children=True, name="llama-n")
    return LlamaEngine(server.url, vocab_size=_vocab(), dialect=dialect, log=str(server.log))


# What the guided configuration gets wrong against the reference, declared.
GUIDED_ENDS = ("llama-server's BPE GGUF has a real EOS (<|endoftext|>, the last id), which "
               "the server bans (a logit bias of -inf) on every request sent with ignore_eos "
               "(every unguided one: the protocol never stops at an EOS), so a greedy row whose "
               "argmax is that id takes another; a guided request ends with the EOS its "
               "grammar forces where the reference stops at the full match; llama.cpp's JSON "
               "schemas allow free whitespace where the reference writes compact JSON "
               "(engines.adapters.http.llama_guided)")


def llama_server_guided() -> LlamaEngine:
    """llama-server on the tiny preset (4 slots, cache_prompt off) over a GGUF with the presets'
    byte-level BPE and its EOS, declaring guided decoding (regex, choice, JSON schema, GBNF:
    engines.adapters.http.llama_guided) and the tokenizer. Not the default configuration: there
    the EOS would be banned on every request (GUIDED_ENDS), and greedy parity with the
    reference would break wherever the model's argmax is the last id."""
    from engines.tokenizer import tokenizer_for

    server = llama_server_process(PRESET, bpe=True)
    dialect = LlamaServer(vocab_size=_vocab(), guided=True, name="llama-guided")
    return LlamaEngine(server.url, vocab_size=_vocab(), dialect=dialect, log=str(server.log),
                       known_failures={"reference_parity": GUIDED_ENDS},
                       tokenizer=str(tokenizer_for(PRESET)))


def llama_server_draft() -> LlamaEngine:
    """Speculative decoding with a draft model: tiny-draft (the tiny preset's first 2 of 4
    layers, the same vocabulary) proposes up to 4 tokens a step, the target verifies them."""
    server = llama_server_process(PRESET, extra=_draft_args())
    return _engine(server, speculative=True, name="llama-draft")


def llama_server_ngram_simple() -> LlamaEngine:
    """Speculative decoding by prompt lookup (`ngram-simple`): the last token looked up in
    the request's own context, the 4 that followed it there drafted. A 1-token lookup: the
    tiny model's random prompts seldom repeat longer n-grams, and a configuration that
    drafts only now and then would fail `logprobs` (report 34) only now and then."""
    server = llama_server_process(PRESET, extra=(
        "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1",
        "--spec-ngram-simple-size-m", str(DRAFT_MAX)))
    return _engine(server, speculative=True, name="llama-ngram-simple")


def llama_server_ngram_mod() -> LlamaEngine:
    """Speculative decoding by llama.cpp's `ngram-mod` drafter (a hashed n-gram pool shared
    by the server's slots), its lookup 1 token (as ngram-simple's), drafts of 1 to 4."""
    server = llama_server_process(PRESET, extra=(
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "1",
        "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", str(DRAFT_MAX)))
    return _engine(server, speculative=True, name="llama-ngram-mod")


def _lora_server(slots: int = 4, *,
                 host_cache: bool = False) -> tuple[Server, dict[str, str]]:
    from engines.adapters.http.llama_lora import gguf_loras

    converted = gguf_loras(PRESET, LORAS, seed=0, binary=llama_server_binary())
    # Each at scale 0 by --lora-scaled FILE:0, not --lora-init-without-apply: in this build
    # that flag leaves every adapter at scale 1 for requests that name none (llama.cpp
    # #28674, open; docs/findings.md), so base requests would run every adapter at once.
    args: list[str] = []
    for _, gguf in converted.values():
        if "," in str(gguf) or ":" in str(gguf):  # the flag's own separators
            raise ValueError(f"--lora-scaled: the path {gguf} holds ',' or ':'")
        args += ["--lora-scaled", f"{gguf}:0"]
    # No host-memory prompt cache (--cache-ram 0): it saves a slot's prompt KV when the slot
    # goes to another request and loads it into any slot for a prompt that matches, whatever
    # adapters computed it, so a base request went on from KV computed under an adapter
    # (docs/findings.md report 47), the adapter list notwithstanding.
    if not host_cache:  # True: the server's default, for the pin of report 47
        args += ["--cache-ram", "0"]
    server = llama_server_process(PRESET, slots=slots, extra=tuple(args))
    return server, {name: peft for name, (peft, _) in converted.items()}


def llama_server_lora() -> LlamaEngine:
    """The tiny preset's first 3 zoo LoRA adapters, per request (`lora`), cache_prompt off."""
    server, loras = _lora_server()
    return _engine(server, loras=loras, name="llama-lora")


def llama_server_lora_cache_prompt() -> LlamaEngine:
    """As llama_server_lora with cache_prompt on: a slot may reuse the KV of its last
    request's prompt, which must not happen across adapters. Base requests list every
    adapter at scale 0: sent without `lora` (as llama_server_lora sends them), they reuse KV
    an adapter computed, and the suite fails parity, reference_parity and prefill_decode
    (docs/findings.md report 36, pinned by tests/adapters/http/test_llama_server_variants.py)."""
    server, loras = _lora_server()
    return _engine(server, loras=loras, cache_prompt=True, name="llama-lora-cache-prompt")


# What a GGUF's weights declare (Capabilities.dtype), by the converter's outtype: ggml's CPU
# matrix products convert the activations to the weights' own dot-product type (F16 rows for
# F16 weights, Q8_0 blocks for Q8_0 ones), so the weights' format is the compute's too. Q8_0
# is int8 in blocks of 32 with an f16 scale each. Norms and biases stay F32 in every file.
WEIGHT_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "q8_0": "int8"}
# The KV cache's (kv_cache_dtype), by --cache-type-k/v.
CACHE_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "q8_0": "q8_0",
                "q4_0": "q4_0"}
# As a user serves a GGUF: llama-server's default cache type (f16), named here so that the
# declaration says what runs, and its default flash attention ("auto": on, on a CPU; it
# computes attention over F16 K and V).
DEPLOYED_CACHE = "f16"


def llama_server_deployed(outtype: str, *, name: str | None = None,
                          log_verbosity: int | None = None) -> LlamaEngine:
    """llama-server on the tiny preset's GGUF at `outtype` (gguf_convert.OUTTYPES) over the
    deployed KV cache (DEPLOYED_CACHE) and flash attention ("auto"), 4 slots, cache_prompt
    off, declaring both. `log_verbosity`: the server's `-lv`; at 4 it logs the file type, the
    K and V cache types and whether flash attention is on, what
    tests/adapters/http/test_llama_precision.py reads back, and also every request's slot
    work (about 18 MB a batching-dev suite run), so the factories leave the default."""
    extra = () if log_verbosity is None else ("-lv", str(log_verbosity))
    server = llama_server_process(PRESET, outtype=outtype, cache_type=DEPLOYED_CACHE,
                                  flash_attn="auto", extra=extra)
    dialect = LlamaServer(vocab_size=_vocab(), name=name or f"llama-{outtype}")
    return LlamaEngine(server.url, vocab_size=_vocab(), dialect=dialect, log=str(server.log),
                       dtype=WEIGHT_DTYPES[outtype],
                       kv_cache_dtype=CACHE_DTYPES[DEPLOYED_CACHE])


def llama_server_f16() -> LlamaEngine:
    """Deployment precision: the tiny preset's GGUF at F16 (the converter's `--outtype f16`)
    with the server's default F16 KV cache and flash attention, 4 slots, cache_prompt off;
    declares float16 weights and cache. Its reference: engines.sequential:sequential_fp16
    (whose own fp16 activations fail `logprobs` on long prompts, where llama.cpp's F32 ones
    stay nearer fp32: docs/engines.md, "At deployment precision", note f)."""
    return llama_server_deployed("f16")


def llama_server_q8_0() -> LlamaEngine:
    """Deployment precision: the GGUF at Q8_0 (`--outtype q8_0`: int8 blocks of 32, an f16
    scale each) with the server's default F16 KV cache and flash attention; declares int8
    weights over a float16 cache. Its reference: the fp32 engines.sequential.SequentialEngine
    (none computes in int8; the header warns of the difference)."""
    return llama_server_deployed("q8_0")
