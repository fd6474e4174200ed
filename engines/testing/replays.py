"""Whether a report's script reproduces: the failing workload replayed on freshly built
engines, N times, and judged by the check that failed.

A report is only useful if its script fails when run. The search confirms a failure on one
fresh engine before it reports it; the state machine's runs and the variants' runs (pooled
engines) are not. So every report counts how many of N replays on fresh engines failed the
same way: all of them confirms it, some of them says it depends on timing, none says it needs
what the engines served before (or a timing the replays did not hit). A failure on a config
variant replays on fresh engines of that variant (and of the main engine, its comparison).

The replays only add a sentence to a report: they never turn a pass into a failure or back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hypothesis import currently_in_test_context
from hypothesis.control import current_build_context

from engines.testing import progress_lines as progress
from engines.testing.checks import Check, catalogue
from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed, StepTimeout
from engines.testing.judging import Judge
from engines.testing.pool import EnginePool
from engines.testing.recorder import Trace, run_workload
from engines.testing.verdict import Failure
from engines.testing.workload import Workload

__all__ = ["REPLAYS", "REPLAYS_SLOW", "confirmation", "replay_count", "replay_failure",
           "reproduces", "shrinking"]

REPLAYS = 5  # replays where engines build fast (EnginePool.cheap)
REPLAYS_SLOW = 2  # where each build takes long (vLLM's CPU engine: ~4 s)


def _fresh_variant(ctx: SuiteContext, variant: str) -> Callable[[Workload], Trace]:
    pool = EnginePool(ctx.options.variants[variant], f"--engine-variant {variant}")

    def run(w: Workload) -> Trace:
        engine = pool.fresh()
        try:
            return run_workload(engine, w, deadline=ctx.step_timeout)
        finally:
            pool.release(engine, ok=False)  # never reused: each replay builds its own

    return run


def _replay_judge(ctx: SuiteContext, variant: str | None) -> Judge:
    """The suite's judge, where variants' runs come from fresh engines of their own (the
    variant runners keep runs: they would hand back the failing traces themselves): only
    the failing variant's, where one is named."""
    names: list[str] = ([variant] if variant is not None and variant in ctx.options.variants
                        else list(ctx.options.variants))
    if not names:
        return ctx.judge
    kv = {n: s for n, s in ctx.judge.kv_variants.items() if n in names}
    return dataclasses.replace(ctx.judge, variants={n: _fresh_variant(ctx, n) for n in names},
                               kv_variants=kv)


def replay_failure(ctx: SuiteContext, w: Workload, error: AssertionError) -> Failure | None:
    """One replay: w on a fresh engine (and a fresh variant, for a variant's failure), judged
    by the check that failed: how it failed again, or None. A crash counts where the failure
    was one, and for a check's failure too (a check's run that crashes fails it)."""
    progress.doing("replaying the failure on freshly built engines")
    check = getattr(error, "prop", None)
    judged: Check | None = next((c for c in catalogue() if c.name == check
                                 and c.prop is not None), None)
    crashed = isinstance(error, EngineCrashed)
    judge = _replay_judge(ctx, getattr(error, "variant", None))
    engine = ctx.pool.fresh()
    trace = None
    try:
        trace = run_workload(engine, w, deadline=ctx.step_timeout)
        if judged is None:
            return None
        judged(trace, judge)
    except EngineCrashed as crash:
        if not (crashed or judged is not None):
            return None
        steps = (crash.step + 1 if crash.step is not None
                 else len(trace.steps) if trace is not None else w.last_event_step + 1)
        return Failure(crash, steps)
    except AssertionError as again:
        if getattr(again, "prop", None) != check or trace is None:
            return None
        return Failure(again, len(trace.steps))
    finally:
        ctx.pool.release(engine, ok=False)
    return None


def reproduces(ctx: SuiteContext, w: Workload, error: AssertionError) -> bool:
    """Whether one replay on fresh engines fails again (replay_failure)."""
    return replay_failure(ctx, w, error) is not None


def replay_count(ctx: SuiteContext, w: Workload, error: AssertionError,
                 n: int | None = None) -> tuple[int, int]:
    """(replays that failed, replays made) on fresh engines."""
    if n is None:
        n = REPLAYS if ctx.pool.cheap else REPLAYS_SLOW
        if isinstance(error, EngineCrashed) and isinstance(error.exception, StepTimeout):
            n = 1  # a call that hung: each replay waits out the step timeout again
    return sum(reproduces(ctx, w, error) for _ in range(n)), n


def shrinking() -> bool:
    """Inside a Hypothesis example that is not the final replay: a report made there is
    thrown away, so its replays would only slow the shrink."""
    return currently_in_test_context() and not current_build_context().is_final


def confirmation(ctx: SuiteContext, w: Workload, error: AssertionError) -> str:
    """The report's sentence on whether its script reproduces ("" while Hypothesis shrinks)."""
    if shrinking():
        return ""
    hits, n = replay_count(ctx, w, error)
    variant = getattr(error, "variant", None)
    where = (f"{n} replays of this workload, each on a freshly built engine"
             + (f" and variant {variant!r}" if variant else ""))
    if hits == n:
        return f"Confirmed on fresh engines: reproduced {hits} of {n} ({where})."
    if hits:
        return (f"Reproduced {hits} of {n} ({where}): it depends on timing or on state the "
                "script does not control, so the script may take several runs to show it.")
    return (f"Not confirmed on a fresh engine: reproduced 0 of {n} ({where}). The failing run "
            "was on engines that had served earlier work, or hit a timing the replays did not.")
