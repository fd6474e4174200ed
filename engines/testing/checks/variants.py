"""variants: the same workload on every config variant (--engine-variant) gives every greedy or
seeded request the main engine's tokens."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.checks.needs import VARIANTS
from engines.testing.features.tenants import FEATURE as TENANTS_FEATURE
from engines.testing.judging.base import Judge, describe, tops
from engines.testing.recorder import EngineCrashed, Trace

__all__ = ["CHECK", "check_variants"]


def check_variants(check: Check, trace: Trace, judge: Judge) -> None:
    """The same workload on every config variant (--engine-variant) gives every greedy or
    seeded request the same tokens as the main engine (a prefix, for aborted requests)."""
    __tracebackhide__ = True
    assert judge.variants, f"{check.name} needs at least one --engine-variant"
    for name, run in judge.variants.items():
        try:
            other = run(trace.workload)
        except EngineCrashed as exc:
            crashed = check.fail(f"variant {name!r} crashed on this workload: {exc}")
            crashed.variant = name
            raise crashed from None
        for r in trace.workload.requests:
            if not judge.comparable(r.params):
                continue
            main, var = trace.tokens(r.request_id), other.tokens(r.request_id)
            if r.request_id in trace.aborted_at or r.request_id in other.aborted_at:
                n = min(len(main), len(var))
                main, var = main[:n], var[:n]
            how = judge.diverges(r.prompt_token_ids, var, main,
                                 observed_top=tops(other, r.request_id),
                                 expected_top=tops(trace, r.request_id))
            if how is not None:
                failure = check.fail(f"{describe(r, trace)} got {var} on variant {name!r} "
                                     f"but {main} on the main engine: "
                                     f"{how.replace('alone', 'main').replace('batched', name)}.")
                failure.variant = name  # the report replays this variant, not make_engine
                raise failure


CHECK = Check("variants", check_variants, needs=(VARIANTS,), draws=(TENANTS_FEATURE.use(),))
