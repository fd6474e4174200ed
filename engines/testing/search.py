"""The search for one check on one engine: the hand-picked seed workloads first (deterministic,
so a declared expected failure fails every time), then a Hypothesis search over workloads.

Failures become reports (engines.testing.report). A leak across workloads cannot be handed to
Hypothesis (it does not replay on a fresh engine, so Hypothesis would call it flaky): the
first one found is kept in this call's own list and reported when the search ends.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from hypothesis import HealthCheck, given, note
from hypothesis import settings as Settings
from hypothesis import strategies as st

from engines.testing import progress_lines as progress
from engines.testing.checks import Check, check_named
from engines.testing.context import SuiteContext
from engines.testing.coverage import BEAMS_UNFIT, Coverage
from engines.testing.features import Drawing, drawing_for
from engines.testing.features.beams import FEATURE as BEAMS
from engines.testing.profiles import forced_seed
from engines.testing.report import explain, explain_leak
from engines.testing.seed_workloads import seed_workloads
from engines.testing.shrink import shrink_workload
from engines.testing.shrink_budget import out_of_time
from engines.testing.strategies import workloads
from engines.testing.verdict import Leak, Outcome, attempt, fails, verify
from engines.testing.workload import Workload

__all__ = ["drawing_of", "search", "search_settings", "strategy_for"]

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def search_settings(parent: Settings | None = None, **overrides: Any) -> Settings:
    """The current Hypothesis profile (or `parent`), minus what cannot suit whole engine runs:
    no per-example deadline (the step timeout guards hangs), no too-slow health checks.
    A seed given with --hypothesis-seed wins over a derandomized profile (batching-ci):
    Hypothesis lets derandomize win, so seeds 1, 2 and 3 would draw the same workloads, and
    a user asking for three runs would get one run three times."""
    if forced_seed() is not None:
        overrides = {"derandomize": False, **overrides}
    return Settings(parent, **{"deadline": None, "suppress_health_check": _SUPPRESS,
                               **overrides})



def drawing_of(ctx: SuiteContext, check: str | Check) -> Drawing:
    """What one check's workloads are drawn from: the engine's limits and the features the
    check uses (engines.testing.features.drawing_for). The check that judges seeded sampling
    (`seeds`) draws it even where the engine declared that check broken (the other checks then
    draw none): it runs as a strict xfail there, and without seeded requests it could not
    fail, nor notice a fix."""
    found = check if isinstance(check, Check) else check_named(check)
    limits = ctx.limits
    if found.sampling:
        limits = dataclasses.replace(limits, sampling=True)
    return drawing_for(limits, found.draws)


def strategy_for(ctx: SuiteContext, check: str) -> st.SearchStrategy[Workload]:
    return workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)


def _stream_seed(ctx: SuiteContext, settings: Settings) -> int | None:
    """The seed every check of this engine draws its workloads under, or None where the run
    already gives them one (--hypothesis-seed). Checks drawing from one strategy then meet
    the same workloads in the same order, and each workload is served once (ctx.runs): a
    check's own search is as random as before, and later checks pay only for judging.
    Derandomized runs get a seed derived from the engine's name, so they stay reproducible;
    others one drawn per session (ctx.stream_seed)."""
    if forced_seed() is not None:
        return None
    if settings.derandomize:
        return int.from_bytes(hashlib.sha256(ctx.name.encode()).digest()[:8], "big")
    return ctx.stream_seed


def _share_stream(test: Any, ctx: SuiteContext) -> None:
    seed = _stream_seed(ctx, test._hypothesis_internal_use_settings)
    if seed is not None:
        # What @seed sets, without the database=None that @seed adds: saved failures are
        # still replayed first.
        test._hypothesis_internal_use_seed = seed


def _replay_hint(ctx: SuiteContext, settings: Settings | None) -> str | None:
    """How to rerun this search, where Hypothesis would not say (its seed is ours)."""
    effective = search_settings(settings)
    if _stream_seed(ctx, effective) is None or effective.derandomize:
        return None
    return (f"workloads drawn under seed {ctx.stream_seed}, shared by every check of this "
            f"engine: --hypothesis-seed={ctx.stream_seed} draws them again")


def _tally(ctx: SuiteContext, check: str, outcome: Outcome, coverage: Coverage) -> None:
    if outcome.trace is not None:
        coverage.record(outcome.trace, ctx.limits)
        found = check_named(check)
        if found.tally is not None and outcome.judged is not None:
            found.tally.add(coverage, outcome.judged, found.name)


def _seeds(ctx: SuiteContext, check: str, coverage: Coverage) -> None:
    """Run the seed workloads; a failure is shrunk greedily (Hypothesis cannot shrink them)."""
    __tracebackhide__ = True
    seeds = seed_workloads(drawing_of(ctx, check), alone=ctx.oracle.tokens)

    def still_fails(candidate: Workload) -> bool:
        progress.example()
        return fails(ctx, candidate, check)

    for index, w in enumerate(seeds, 1):
        progress.seed_workload(index, len(seeds))
        outcome = verify(ctx, w, check)
        _tally(ctx, check, outcome, coverage)
        if outcome.leak is not None:
            raise explain_leak(ctx, outcome.leak, w, check)
        if outcome.failure is not None and not check_named(check).search:
            raise explain(ctx, outcome.failure, w)  # statistical: no shrinking by replays
        if outcome.failure is not None:
            progress.failure()
            shrunk = shrink_workload(w, still_fails, out_of_time=out_of_time)
            # Replayed on a fresh engine, as the report's script does: on a reused one, what
            # it served before can hide the failure (a prefix cache holding right blocks).
            again = attempt(ctx, ctx.pool.fresh(), shrunk, check)[0]
            if again is not None:
                raise explain(ctx, again, shrunk)
            raise explain(ctx, outcome.failure, w)  # the shrunk one did not fail on replay


def search(ctx: SuiteContext, check: str, *, settings: Settings | None = None,
           seeds: bool = True) -> Coverage:
    """Check one property; raises Violation with a runnable counterexample, else returns what
    the passing workloads exercised."""
    __tracebackhide__ = True
    coverage = Coverage()
    drawing = drawing_of(ctx, check)
    if BEAMS.name in (use.feature for use in check_named(check).draws) \
            and drawing.draws(BEAMS) and drawing.beam_width < 2:
        coverage.most[BEAMS_UNFIT] = 1  # said in the summary, not skipped silently
    if seeds:
        _seeds(ctx, check, coverage)
    if not check_named(check).search:
        return coverage
    leaks: list[tuple[Leak, Workload]] = []
    replay = _replay_hint(ctx, settings)

    @search_settings(settings)
    @given(strategy_for(ctx, check))
    def check_workload(workload: Workload) -> None:
        if replay is not None:
            note(replay)
        progress.example()
        outcome = verify(ctx, workload, check)
        if outcome.failure is not None:
            progress.failure()
            # One raise site, outside any except block: Hypothesis then sees every failure of
            # this check as one bug and shrinks toward the smallest counterexample.
            raise explain(ctx, outcome.failure, workload)
        if outcome.leak is not None and not leaks:
            leaks.append((outcome.leak, workload))
        _tally(ctx, check, outcome, coverage)

    inner: Any = check_workload.hypothesis.inner_test  # type: ignore[attr-defined]
    # The database key stays per check: a failure saved by one check is replayed by it.
    inner._hypothesis_internal_add_digest = f"{ctx.name}-{check}".encode()
    _share_stream(check_workload, ctx)
    check_workload()
    if leaks:
        leak, workload = leaks[0]
        raise explain_leak(ctx, leak, workload, check)
    return coverage
