"""One workload, one check: serve it on an engine, judge the trace, and say what happened.

A failure on a reused engine is confirmed on a fresh one, so that a verdict depends on the
workload alone (Hypothesis replays and shrinks it); one that does not replay on a fresh engine
is a leak across workloads, returned with the engine's history for the report to replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engines.protocol import Engine
from engines.testing.checks import Check, check_named
from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed
from engines.testing.recorder import Trace, run_workload
from engines.testing.workload import Workload

__all__ = ["Failure", "Leak", "Outcome", "attempt", "fails", "failure_after", "verify"]


@dataclass(frozen=True, slots=True)
class Failure:
    error: AssertionError  # a Violation, or EngineCrashed from inside a protocol call
    steps: int  # step() calls the failing run made (the repro script makes one more)


@dataclass(frozen=True, slots=True)
class Leak:
    first: Failure  # how the workload failed on the reused engine
    history: tuple[Workload, ...]  # what that engine had served before, oldest first


@dataclass(frozen=True, slots=True)
class Outcome:
    failure: Failure | None = None  # the workload fails on a fresh engine too
    leak: Leak | None = None  # it fails only after the engine's history
    trace: Trace | None = None  # the passing run, for the coverage tally
    judged: Any = None  # what the check's property returned on it, for the check's tally

    @property
    def ok(self) -> bool:
        return self.failure is None and self.leak is None


def _property(check: str) -> Check:
    found = check_named(check)
    if found.prop is None:
        raise ValueError(f"check {check!r} runs the state machine, not workloads")
    return found


def _run(ctx: SuiteContext, engine: Engine, w: Workload,
         check: str) -> tuple[Failure | None, Trace | None, Any]:
    trace = None
    try:
        trace = run_workload(engine, w, deadline=ctx.step_timeout)
        judged = _property(check)(trace, ctx.judge)
    except AssertionError as exc:
        if trace is None and isinstance(exc, EngineCrashed) and exc.step is not None:
            steps = exc.step + 1  # the run crashed in this step
        else:
            steps = len(trace.steps) if trace is not None else w.last_event_step + 1
        return Failure(exc, steps), trace, None
    return None, trace, judged


def attempt(ctx: SuiteContext, engine: Engine, w: Workload,
            check: str) -> tuple[Failure | None, Trace | None]:
    """Judge w on engine; the engine goes back to the pool unless it failed or stalled."""
    failure, trace, _ = _attempt(ctx, engine, w, check)
    return failure, trace


def _attempt(ctx: SuiteContext, engine: Engine, w: Workload,
             check: str) -> tuple[Failure | None, Trace | None, Any]:
    failure, trace, judged = _run(ctx, engine, w, check)
    if failure is None and trace is not None:
        ctx.pool.served(engine, w)
    ctx.pool.release(engine, ok=failure is None and trace is not None and not trace.stalled)
    return failure, trace, judged


def fails(ctx: SuiteContext, w: Workload, check: str) -> bool:
    """Whether w fails the check: on a fresh engine where engines are cheap to build."""
    engine = ctx.pool.fresh() if ctx.pool.cheap else ctx.pool.acquire()[0]
    return attempt(ctx, engine, w, check)[0] is not None


def _judged(ctx: SuiteContext, trace: Trace, check: str) -> tuple[Failure | None, Any]:
    try:
        return None, _property(check)(trace, ctx.judge)
    except AssertionError as exc:
        return Failure(exc, len(trace.steps)), None


def verify(ctx: SuiteContext, w: Workload, check: str) -> Outcome:
    """Judge w on a pooled engine, confirming a failure on a reused one with a fresh one.
    A run another check already made of w is judged instead of serving w again."""
    run = ctx.runs.get(w)
    if run is not None:
        trace: Trace | None = run.trace
        fresh, history = run.fresh, run.history
        failure, judged = _judged(ctx, run.trace, check)
    else:
        engine, fresh = ctx.pool.acquire()
        history = tuple(ctx.pool.history(engine))
        failure, trace, judged = _attempt(ctx, engine, w, check)
        ctx.runs.keep(w, trace, fresh=fresh, history=history)
    if failure is None:
        return Outcome(trace=trace, judged=judged)
    if fresh:
        return Outcome(failure=failure)
    confirmed, trace, judged = _attempt(ctx, ctx.pool.fresh(), w, check)
    if confirmed is not None:
        return Outcome(failure=confirmed)
    return Outcome(leak=Leak(failure, history), trace=trace, judged=judged)


def failure_after(ctx: SuiteContext, earlier: Sequence[Workload], w: Workload,
                  check: str) -> Failure | None:
    """How w fails the check on a fresh engine that first serves `earlier` (unjudged)."""
    return ctx.pool.after_history(
        earlier, lambda engine, e: run_workload(engine, e, deadline=ctx.step_timeout),
        lambda engine: _run(ctx, engine, w, check)[0], drained=True)
