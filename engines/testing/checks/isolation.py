"""isolation: no tenant (LoRA adapter, cache salt) is handed another's KV, judged by whichever
view of sharing the engine gives, both where it gives both. Block tables (KVIntrospection:
engines.testing.judging.tenant_blocks) show a block held by two tenants at once; the engine's
own count of cached prompt tokens (StepOutput.cached_prompt_tokens, declared in
`output_fields`: engines.testing.judging .tenant_counts) shows KV handed across tenants
wherever it came from, a server's included. The summary says which view judged how much, and
what neither could."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from engines.testing.checks.base import Check
from engines.testing.checks.needs import SHARING, TENANTS
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.tenants import FEATURE as TENANTS_FEATURE
from engines.testing.judging import tenant_blocks
from engines.testing.judging.base import Judge
from engines.testing.judging.tenant_counts import CountsJudged, check_counts
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "Both", "check_tenant_isolation"]


@dataclass(frozen=True, slots=True)
class Both:
    kv: tenant_blocks.Judged | None  # None: the trace has no block tables
    counts: CountsJudged | None  # None: the engine does not report its cached tokens


def check_tenant_isolation(check: Check, trace: Trace, judge: Judge) -> Both:
    """Each view the engine gives, judged (raising check.fail on a leak or on isolation
    by caching nothing)."""
    __tracebackhide__ = True
    tables = any(rec.kv is not None for rec in trace.steps)
    kv = tenant_blocks.check_isolation(check, trace, judge) if tables else None
    counts = check_counts(check, trace) if trace.cached_counts else None
    return Both(kv, counts)


def _add(coverage: Coverage, judged: Both, check: str) -> None:
    if judged.kv is not None:
        tenant_blocks.TALLY.add(coverage, judged.kv, check)
    if judged.counts is not None:
        c = coverage.counts
        for key, n in asdict(judged.counts).items():
            c[f"{check}: counts {key}"] += n
        c[f"{check}: counts workloads"] += 1


def _counts_notes(data: Mapping[str, int], check: str) -> list[str]:
    get = lambda key: data.get(f"{check}: counts {key}", 0)  # noqa: E731
    if not get("workloads"):
        return []
    out = [f"{check} (the engine's cached-token counts): {get('salted')} salted request(s) "
           f"judged for KV from another tenant ({get('salted_hits')} with a hit; "
           f"{get('cross_candidates')} where another tenant had computed a longer prefix of "
           "the prompt than its own); "
           f"{get('repeats')} same-tenant repeat(s) judged for a hit, where the base tenant's "
           f"control hit ({get('controls')} control hit(s)); {get('reported')} count(s) "
           "reported"]
    if get("unsalted_hits"):
        out.append(f"{check}: {get('unsalted_hits')} hit(s) of requests without a cache salt "
                   "not judged for their source: the engine may hold their tenant's KV from "
                   "before this run (a server's earlier requests), which the suite cannot see")
    if get("unexplained"):
        out.append(f"{check}: {get('unexplained')} salted hit(s) longer than any prefix this "
                   "run surely computed, for any tenant, not judged (the engine counts more "
                   "than a prefix, or computed it later than the suite can show)")
    if get("unreported"):
        out.append(f"{check}: {get('unreported')} request(s) came back without a cached-token "
                   "count (the engine declares it; a server may not send it, e.g. vLLM "
                   "without --enable-prompt-tokens-details): not judged")
    if get("unjudged_repeats"):
        out.append(f"{check}: {get('unjudged_repeats')} same-tenant repeat(s) could have hit "
                   "but were not judged: the base tenant's repeat hit nothing in their run, or "
                   "their prompt is shorter than its hit")
    if not get("repeats"):
        out.append(f"{check}: by the counts, no hit was demanded in any workload (no control "
                   "hit), so 'no sharing' may hold by caching nothing")
    return out


def _notes(data: Mapping[str, int], check: str) -> list[str]:
    return tenant_blocks.TALLY.notes(data, check) + _counts_notes(data, check)


TALLY = Tally(_add, _notes)


CHECK = Check("isolation", check_tenant_isolation, needs=(SHARING, TENANTS),
              draws=(TENANTS_FEATURE.use(),), tally=TALLY)
