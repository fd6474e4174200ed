"""The checks: one registry (REGISTRY), each check one object, and the one place that decides
which checks apply to an engine, and why one does not.

A check runs, is skipped (with the reason printed: the engine lacks an optional protocol, or
the run was not given what the check compares against), or runs as a strict xfail (the engine
declared it breaks it, in `expected_failed_checks`). Nothing else in the suite decides this.

Everything the suite does by check derives from REGISTRY: the catalogue's order and the test
ids (`<engine>-<check>`), the skip and xfail decision, what each check draws, when the state
machine judges it, and what it adds to the coverage summary. A new check is a property
function in a file of its own under `properties/` (taking its Check, raising `check.fail`,
with its Tally beside it if it counts anything) and one `Check(...)` line below, its module
in the import above it. Its name is written there and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engines.protocol import (
    CONSTRAINT_PARAMS,
    LOGPROBS_FIELD,
    PROMPT_LOGPROBS_FIELD,
    TEXT_PARAMS,
    unknown_name,
)
from engines.testing.check import Check, Draws, Given, Moment, Need, Property
from engines.testing.coverage import Coverage
from engines.testing.limits import EngineLimits
from engines.testing.processing import declared_greedy_filters
from engines.testing.properties import (
    beam_search,
    children,
    constraints,
    drain,
    greedy_filters,
    kv,
    logprobs,
    parity,
    prompt_logprobs,
    requests,
    seeds,
    sequence_draws,
    slots,
    stop_strings,
    streamed_text,
    tenant_isolation,
    unseeded_draws,
)
from engines.testing.sequence_draws import SEQUENCE_DRAWS
from engines.testing.spec_coverage import speculation_notes
from engines.testing.tenant_draws import has_tenants
from engines.testing.unseeded import DRAWS

__all__ = ["CHECKS", "KV", "LOAD", "PROMPT_LOGPROBS", "PROPERTIES", "REFERENCE", "REGISTRY",
           "SLOTS", "SLOT_CHECKS", "VARIANTS", "Applicability", "Check", "Draws", "Given",
           "Moment", "Need", "Property",
           "CHILDREN", "STOP_STRINGS", "TOKENIZER", "BEAMS",
           "applicability", "catalogue", "check_named", "draws_sampling", "known_checks",
           "summary_notes"]

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
                     "with; under tie-aware parity they are not drawn)")
CONSTRAINTS = Need("constraint params",
                   lambda g: bool(CONSTRAINT_PARAMS & g.limits.sampling_fields),
                   "{check} needs allowed_token_ids, logit_bias, bad_words or guided in "
                   "supported_sampling (of the engine and of every engine it is compared "
                   "with; none is drawn under tie-aware parity)")
TOKENIZER = Need("a tokenizer", lambda g: g.limits.tokenizer is not None,
                 "{check} needs a declared tokenizer (engines.protocol.tokenizer_of): text is "
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


# Top logprobs the logprobs check asks of every request: enough for a neighbour's to differ.
LOGPROBS = 5
# Cheap enough to judge the partial trace after every step.
_EVERY_STEP: frozenset[Moment] = frozenset({"step"})

TENANTS = Need("tenants", lambda g: has_tenants(g.limits),
               "{check} needs tenants to draw: an engine declaring \"lora\" in "
               "supported_sampling with adapters (`loras`), or \"cache_salt\" (every engine "
               "compared declaring it)")
# Either view of what an engine shares: its block tables, or its own count of cached prompt
# tokens per request (engines.testing.properties.tenant_isolation).
SHARING = Need("a view of prefix sharing", lambda g: g.limits.kv or g.limits.cached_counts,
               "{check} needs engines.protocol.KVIntrospection on the engine (its block "
               "tables), or cached_prompt_tokens in its output_fields (its own count of the "
               "prompt tokens each request took from its prefix cache)")
# Checks drawing requests under adapters and salts (engines.testing.tenant_draws).
_TENANTS = Draws(tenants=True)

# Checks another one's entry names (bad_input re-judges them): bound before the registry.
PARITY = Check("parity", parity.check_parity, draws=_TENANTS)
BUDGET_FINISH = Check("budget_finish", requests.check_budget_finish, machine=_EVERY_STEP)
REFERENCE_PARITY = Check("reference_parity", parity.check_reference_parity, needs=(REFERENCE,),
                         draws=_TENANTS, tally=parity.REFERENCE_TALLY)

# In the order a report lists them; test ids read <engine>-<check>.
REGISTRY: tuple[Check, ...] = (
    PARITY,
    REFERENCE_PARITY,
    Check("prefill_decode", parity.check_prefill_decode, draws=_TENANTS),
    Check("variants", parity.check_variants, needs=(VARIANTS,), draws=_TENANTS),
    Check("seeds", seeds.check_seeds, draws=Draws(seed_groups=True), sampling=True,
          tally=seeds.TALLY),
    Check("logprobs", logprobs.check_logprobs, needs=(TOP_LOGPROBS,),
          draws=Draws(logprobs=LOGPROBS),
          tally=logprobs.TALLY),
    Check("prompt_logprobs", prompt_logprobs.check_prompt_logprobs, needs=(PROMPT_LOGPROBS,),
          draws=Draws(prompt_logprobs=LOGPROBS), tally=prompt_logprobs.TALLY),
    Check("greedy_filters", greedy_filters.check_greedy_filters, needs=(GREEDY_FILTER,),
          draws=Draws(greedy_filters=True), tally=greedy_filters.TALLY),
    Check("sampling_distribution", unseeded_draws.check_sampling_distribution,
          needs=(REFERENCE, TEMPERATURE), draws=Draws(unseeded_draws=DRAWS, search=False),
          tally=unseeded_draws.TALLY),
    Check("sequence_distribution", sequence_draws.check_sequence_distribution,
          needs=(REFERENCE, TEMPERATURE),
          draws=Draws(sequence_draws=SEQUENCE_DRAWS, search=False),
          tally=sequence_draws.TALLY),
    Check("constraints", constraints.check_constraints, needs=(CONSTRAINTS,),
          draws=Draws(constraints=True), tally=constraints.TALLY),
    Check("streamed_text", streamed_text.check_streamed_text, needs=(TOKENIZER,),
          tally=streamed_text.TALLY),
    Check("stop_strings", stop_strings.check_stop_strings, needs=(TOKENIZER, STOP_STRINGS),
          tally=stop_strings.TALLY),
    Check("children", children.check_children, needs=(CHILDREN,),
          draws=Draws(children=True), tally=children.TALLY),
    Check("beam_search", beam_search.check_beam_search, needs=(BEAMS,),
          draws=Draws(beams=True), tally=beam_search.TALLY, rejudges=(REFERENCE_PARITY,)),
    Check("token_range", requests.check_token_range),
    BUDGET_FINISH,
    Check("liveness", requests.check_liveness, machine=frozenset({"has_work lied"})),
    Check("bad_input", requests.check_bad_input, draws=Draws(bad=(1, 2), bad_seed_workloads=True),
          machine=frozenset({"bad request"}), tally=requests.BAD_INPUT_TALLY,
          rejudges=(PARITY, BUDGET_FINISH)),
    Check("compaction", slots.check_compaction, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("slot_lengths", slots.check_slot_lengths, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("zero_waste", slots.check_zero_waste, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("work_conservation", slots.check_work_conservation, needs=(SLOTS,)),
    Check("kv_accounting", kv.check_kv_accounting, needs=(KV,),
          draws=Draws(children=True, beams=True, beams_fit_variants=True),
          tally=kv.TALLY),
    Check("drain", drain.check_drain, needs=(LOAD,)),
    Check("isolation", tenant_isolation.check_tenant_isolation, needs=(SHARING, TENANTS),
          draws=_TENANTS, tally=tenant_isolation.TALLY),
    Check("stateful", None),
)


def catalogue() -> tuple[Check, ...]:
    """The registry as it is now (read at each call, so that every view below agrees)."""
    return REGISTRY


def check_named(name: str) -> Check:
    for check in catalogue():
        if check.name == name:
            return check
    raise KeyError(f"no check named {name!r}; the checks are "
                   f"{', '.join(c.name for c in catalogue())}")


def known_checks(declared: Mapping[str, str], *, who: str = "expected_failed_checks") -> None:
    """Every check an engine declares broken is one of the registry's: a ValueError names a
    misspelt one (and the nearest real name), which would otherwise declare nothing."""
    names = [c.name for c in catalogue()]
    for name in declared:
        if name not in names:
            raise ValueError(unknown_name(f"{who}: check", name, names))


def summary_notes(data: Mapping[str, int]) -> list[str]:
    """The coverage summary's notes for one engine: what no workload could reach, then each
    check's own sentences (its Tally's), in registry order."""
    out = Coverage.notes(data)
    for check in catalogue():
        if check.tally is not None:
            out += check.tally.notes(data, check.name)
    return out + speculation_notes(data)  # engines.testing.spec_coverage


def draws_sampling(declared: Mapping[str, str]) -> bool:
    """Whether the checks may draw sampled requests: not where the engine declared the check
    that judges seeded sampling broken."""
    return not any(c.sampling and c.name in declared for c in catalogue())


# Views of the registry, for code that wants the names only.
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
SLOT_CHECKS: frozenset[str] = frozenset(c.name for c in REGISTRY if SLOTS in c.needs)
PROPERTIES: dict[str, Property] = {c.name: c.prop for c in REGISTRY if c.prop is not None}


@dataclass(frozen=True, slots=True)
class Applicability:
    status: Literal["run", "skip", "xfail"]
    reason: str = ""


def applicability(limits: EngineLimits, declared: Mapping[str, str], *, reference: bool = False,
                  variants: bool = False, kv_variants: bool = False
                  ) -> dict[str, Applicability]:
    """Every check's fate on an engine with these limits and declared expected failures,
    given whether the run has a reference engine and config variants (and whether any of
    them has a KV view)."""
    given = Given(limits, reference=reference, variants=variants, kv_variants=kv_variants)
    out: dict[str, Applicability] = {}
    for check in catalogue():
        skip = check.skip_reason(given)
        if skip is not None:
            out[check.name] = Applicability("skip", skip)
        elif check.name in declared:
            out[check.name] = Applicability("xfail", declared[check.name])
        else:
            out[check.name] = Applicability("run")
    return out
