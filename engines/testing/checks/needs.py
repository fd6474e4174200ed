"""What checks need to run (a `Need` each): an optional protocol on the engine, something the
run was given (a reference engine, config variants), or fields every engine compared declares.
The first Need a run lacks is the check's skip reason, said in the run's header and summary."""

from __future__ import annotations

from engines.protocol import CONSTRAINT_PARAMS, LOGPROBS_FIELD, PROMPT_LOGPROBS_FIELD, TEXT_PARAMS
from engines.testing.checks.base import Need
from engines.testing.features.tenants import has_tenants
from engines.testing.processing import declared_greedy_filters

__all__ = ["BEAMS", "CHILDREN", "CONSTRAINTS", "GREEDY_FILTER", "KV", "LOAD", "PROMPT_LOGPROBS",
           "REFERENCE", "SHARING", "SLOTS", "STOP_STRINGS", "TEMPERATURE", "TENANTS", "TOKENIZER",
           "TOP_LOGPROBS", "VARIANTS"]

SLOTS = Need("slot introspection", lambda g: g.limits.max_batch_size is not None,
             "{check} needs engines.protocol.SlotIntrospection")
KV = Need("KV introspection", lambda g: g.limits.kv or g.kv_variants,
          "{check} needs engines.protocol.KVIntrospection (on the engine or a variant)")
LOAD = Need("load introspection", lambda g: g.limits.load,
            "{check} needs engines.protocol.LoadIntrospection (a server's own count of "
            "running requests and KV use, e.g. vLLM's /metrics)")
REFERENCE = Need("a reference engine", lambda g: g.reference,
                 "no reference engine given (--reference-engine MODULE:CALLABLE, e.g. "
                 "engines.sequential:SequentialEngine over the same weights)")
PROMPT_LOGPROBS = Need("prompt logprobs",
                       lambda g: PROMPT_LOGPROBS_FIELD in g.limits.sampling_fields,
                       "{check} needs prompt_logprobs in supported_sampling (of the engine and "
                       "of every engine it is compared with)")
# Top logprobs are a base field, but an engine may refuse them (llama-server's guided
# configuration: docs/findings.md report 43); the check that asks every request for them
# needs them declared.
TOP_LOGPROBS = Need("top logprobs", lambda g: LOGPROBS_FIELD in g.limits.sampling_fields,
                    "{check} needs logprobs in supported_sampling (of the engine and of every "
                    "engine it is compared with)")
TEMPERATURE = Need("temperature", lambda g: "temperature" in g.limits.sampling_fields,
                   "{check} needs temperature in supported_sampling (of the engine and of "
                   "every engine it is compared with)")
GREEDY_FILTER = Need("a filter that can leave one token",
                     lambda g: bool(declared_greedy_filters(g.limits)),
                     "{check} needs temperature and one of top_k, min_p, top_p in "
                     "supported_sampling (of the engine and of every engine it is compared "
                     "with)")
CONSTRAINTS = Need("constraint params",
                   lambda g: bool(CONSTRAINT_PARAMS & g.limits.sampling_fields),
                   "{check} needs allowed_token_ids, logit_bias, bad_words or guided in "
                   "supported_sampling (of the engine and of every engine it is compared "
                   "with)")
TOKENIZER = Need("a tokenizer", lambda g: g.limits.tokenizer is not None,
                 "{check} needs a declared tokenizer (Capabilities.tokenizer): text is "
                 "its decode")
STOP_STRINGS = Need("stop strings", lambda g: TEXT_PARAMS <= g.limits.sampling_fields,
                    "{check} needs stop and include_stop_str_in_output in supported_sampling "
                    "(of the engine and of every engine it is compared with)")
CHILDREN = Need("n > 1", lambda g: "n" in g.limits.sampling_fields,
                "{check} needs n in supported_sampling (of the engine and of every engine it "
                "is compared with)")
BEAMS = Need("beam search", lambda g: "beam_width" in g.limits.sampling_fields,
             "{check} needs beam_width in supported_sampling (of the engine and of every "
             "engine it is compared with)")
VARIANTS = Need("config variants", lambda g: g.variants,
                "no config variant given (--engine-variant NAME=MODULE:CALLABLE)")
TENANTS = Need("tenants", lambda g: has_tenants(g.limits),
               "{check} needs tenants to draw: an engine declaring \"lora\" in "
               "supported_sampling with adapters (`loras`), or \"cache_salt\" (every engine "
               "compared declaring it)")
# Either view of what an engine shares: its block tables, or its own count of cached prompt
# tokens per request (engines.testing.checks.isolation).
SHARING = Need("a view of prefix sharing", lambda g: g.limits.kv or g.limits.cached_counts,
               "{check} needs engines.protocol.KVIntrospection on the engine (its block "
               "tables), or cached_prompt_tokens in its output_fields (its own count of the "
               "prompt tokens each request took from its prefix cache)")
