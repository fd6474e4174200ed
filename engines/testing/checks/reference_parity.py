"""reference_parity: every greedy request's tokens equal what the reference engine
(--reference-engine) generates for it alone."""

from __future__ import annotations

from collections.abc import Mapping

from engines.testing.checks.base import Check
from engines.testing.checks.needs import REFERENCE
from engines.testing.checks.parity import FORCED_TALLY, owes_prefix_only, where
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.tenants import FEATURE as TENANTS_FEATURE
from engines.testing.judging.base import Judge, describe, tops
from engines.testing.judging.processed import Forced
from engines.testing.oracle import NotServable
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "check_reference_parity"]


def check_reference_parity(check: Check, trace: Trace, judge: Judge) -> tuple[int, Forced]:
    """Every greedy request's tokens equal what the reference engine (--reference-engine)
    generates for it alone. Catches what self-parity cannot: bugs that make batched and alone
    runs wrong alike (a dropped bias, RoPE off by one everywhere). A request under a LoRA
    adapter is compared where the reference serves the same adapter directory (under any
    name, or added through its LoRAManagement); the others are counted, not judged, and the
    count returned (REFERENCE_TALLY says it). An engine that computes or caches in a
    quantized format the reference does not is judged by top-k membership at a divergence,
    not by a near-tie (engines.testing.precision; Judge.diverges)."""
    __tracebackhide__ = True
    reference = judge.reference
    assert reference is not None, f"{check.name} needs a reference engine"
    unknown = 0  # requests under an adapter the reference cannot serve
    forced = Forced()  # processed greedy choices judged under tie-aware parity
    for r in trace.workload.requests:
        if r.params.temperature > 0:
            continue  # engines' samplers differ: only greedy tokens are comparable
        try:
            expected = reference(r.prompt_token_ids, r.params,
                                 lora_path=trace.lora_paths.get(r.request_id))
        except NotServable:
            unknown += 1
            continue
        got = trace.tokens(r.request_id)
        exp = expected.tokens
        if owes_prefix_only(trace, r, len(got), len(exp)):
            exp = exp[: len(got)]
        how = judge.diverges(r.prompt_token_ids, got, exp, observed_top=tops(trace, r.request_id),
                             expected_top=expected.top_logprobs, params=r.params,
                             forced=forced, reference=True)
        if how is not None:
            raise check.fail(
                f"{describe(r, trace)} diverged from the reference "
                f"engine {where(trace, r, got, exp)}, {how.replace('alone', 'reference')}"
                f". The reference generated {list(expected.tokens)}; this engine {got}.")
    return unknown, forced


UNSERVED = "tenants: requests under an adapter the reference cannot serve"


def _add(coverage: Coverage, judged: tuple[int, Forced], check: str) -> None:
    unknown, forced = judged
    coverage.counts[UNSERVED] += unknown or 0
    FORCED_TALLY.add(coverage, forced, check)


def _notes(data: Mapping[str, int], check: str) -> list[str]:
    n = data.get(UNSERVED, 0)
    forced = FORCED_TALLY.notes(data, check)
    if not n:
        return forced
    return [*forced, f"{check}: {n} request(s) under a LoRA adapter were not judged: the reference "
            "engine neither serves the adapter's directory (its `loras` declaration) nor has "
            "add_lora (engines.protocol.LoRAManagement)"]


TALLY = Tally(_add, _notes)


CHECK = Check("reference_parity", check_reference_parity, needs=(REFERENCE,),
              draws=(TENANTS_FEATURE.use(),), tally=TALLY)
