"""One engine factory under test: its engine pools, alone oracle, limits and the search loop
that checks one property over seed workloads and then Hypothesis-drawn ones."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings

from engines.protocol import Engine, SamplingParams
from engines.testing.driver import EngineCrashed, Trace, is_drained, run_workload
from engines.testing.leaks import minimal_leak
from engines.testing.oracle import AloneOracle, ParityMode
from engines.testing.pool import EnginePool
from engines.testing.properties import PROPERTIES, SLOT_PROPERTIES, Judge, Violation
from engines.testing.shrink import shrink_workload
from engines.testing.strategies import EngineLimits, seed_workloads, workloads
from engines.testing.workload import Workload, repro_sequence, repro_snippet

__all__ = ["CHECKS", "Suite", "factory_source"]

CHECKS = (*PROPERTIES, "stateful")
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def factory_source(factory: Callable[..., Any], spec: str | None) -> str:
    """Source lines binding `make_engine` for a repro snippet."""
    if spec:
        module, _, attr = spec.partition(":")
        return f"from {module} import {attr.split('.')[0]} as make_engine"
    if isinstance(factory, functools.partial):
        inner = factory_source(factory.func, None)
        if inner.startswith("from "):
            args = [repr(a) for a in factory.args]
            args += [f"{k}={v!r}" for k, v in factory.keywords.items()]
            return (f"{inner.replace(' as make_engine', '')}\nfrom functools import partial\n"
                    f"make_engine = partial({factory.func.__name__}, {', '.join(args)})")
    where = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if where and where != "__main__" and qualname and "<" not in qualname:
        return f"from {where} import {qualname.split('.')[0]} as make_engine"
    return "make_engine = ...  # your engine factory (what the engine_factory fixture returns)"


class Suite:
    def __init__(
        self,
        factory: Callable[[], Engine],
        *,
        name: str = "engine",
        spec: str | None = None,
        parity: ParityMode = "exact",
        tolerance: float = 1e-3,
        step_timeout: float | None = 60.0,
    ) -> None:
        self.factory = factory
        self.name = name
        source = f"--engine {spec}" if spec else f"engine factory {name}"
        self.pool = EnginePool(factory, source)
        self.oracle = AloneOracle(EnginePool(factory, source), deadline=step_timeout)
        self.judge = Judge(self.oracle, parity, tolerance)
        self.step_timeout = step_timeout
        self.factory_src = factory_source(factory, spec)
        self._limits: EngineLimits | None = None
        self.expected_failures: Mapping[str, str] = {}
        self.history_failures: list[str] = []
        self._trace: Trace | None = None
        self.examples = 0  # workloads verified without failure, for reports
        self.use_seeds = True  # run the hand-picked seed workloads before the search
        self.overrides: dict[str, Any] = {}  # Hypothesis settings over the current profile

    # -- setup ------------------------------------------------------------------------------
    @property
    def limits(self) -> EngineLimits:
        if self._limits is None:
            self.prepare()
        assert self._limits is not None
        return self._limits

    def prepare(self) -> None:
        """Build one engine (checking it speaks the protocol), read its limits and declared
        expected failures, and probe seeded sampling; the engine goes to the pool."""
        if self._limits is not None:
            return
        start = time.perf_counter()
        engine = self.pool.fresh()
        self.pool.cheap = self.oracle.pool.cheap = time.perf_counter() - start < 0.05
        self.expected_failures = dict(getattr(engine, "expected_failed_checks", {}) or {})
        limits = EngineLimits.of(engine, logprobs=5 if self.judge.parity == "tie-aware" else 0)
        self.pool.release(engine)
        self._limits = EngineLimits.of(
            engine, seeded_sampling=self._seeded_sampling_works(), logprobs=limits.logprobs
        )

    def _seeded_sampling_works(self) -> bool:
        params = SamplingParams(max_tokens=4, temperature=1.0, seed=1234)
        try:
            first = self.oracle.serve((1, 2, 3), params)
            second = self.oracle.serve((1, 2, 3), params)
        except (EngineCrashed, ValueError, NotImplementedError):
            return False
        return first.tokens == second.tokens

    # -- one workload -------------------------------------------------------------------------
    def _judge(self, engine: Engine, w: Workload, prop: str) -> Trace:
        self._trace = None
        trace = self._trace = run_workload(engine, w, deadline=self.step_timeout)
        PROPERTIES[prop](trace, self.judge)
        return trace

    def explain(self, exc: AssertionError, w: Workload, steps: int | None = None) -> Violation:
        """exc's message plus the counterexample as a runnable script."""
        if steps is None:
            steps = len(self._trace.steps) if self._trace else w.last_event_step + 1
        snippet = repro_snippet(w, self.factory_src, steps + 1)
        prop = getattr(exc, "prop", "engine")
        return Violation(
            prop,
            f"{exc}\n\nCounterexample ({len(w.requests)} request(s), {len(w.bad)} bad, "
            f"{len(w.aborts)} abort(s), {steps} step(s)) as a runnable script:\n\n{snippet}\n",
        )

    def _attempt(self, engine: Engine, w: Workload, prop: str) -> AssertionError | None:
        try:
            trace = self._judge(engine, w, prop)
        except AssertionError as exc:
            self.pool.release(engine, ok=False)
            return exc
        self.pool.served(engine, w)
        self.pool.release(engine, ok=not trace.stalled)
        return None

    def _failure_after(self, earlier: Sequence[Workload], w: Workload,
                       prop: str) -> AssertionError | None:
        """How w fails prop on a fresh engine that first serves `earlier` (unjudged)."""
        engine = self.pool.fresh()
        try:
            try:
                for e in earlier:
                    run_workload(engine, e, deadline=self.step_timeout)
            except Exception:
                return None  # an earlier workload broke the engine: a different failure
            if not is_drained(engine):
                return None
            try:
                self._judge(engine, w, prop)
            except AssertionError as exc:
                return exc
            return None
        finally:
            self.pool.release(engine, ok=False)  # never reused: its history is not the pool's

    def _leak_report(self, first: AssertionError, history: list[Workload], w: Workload,
                     prop: str) -> str:
        # Every try builds an engine: a handful for one that is slow to build.
        cheap = self.pool.cheap
        earlier, w = minimal_leak(
            history, w, lambda e, c: self._failure_after(e, c, prop) is not None,
            shrink=cheap, budget=40 if cheap else 4)
        failure = self._failure_after(earlier, w, prop) or first
        script = repro_sequence(earlier, w, self.factory_src, w.step_bound())
        return (f"{failure}\n\nThis workload passes on a fresh engine but fails on one that has "
                f"served the {len(earlier)} earlier workload(s) in the script below, drained "
                "them and reported itself idle: state leaks across requests. Counterexample "
                f"({len(earlier)} earlier workload(s) of {sum(len(e.requests) for e in earlier)}"
                f" request(s), then {len(w.requests)} request(s)) as a runnable script:"
                f"\n\n{script}\n")

    def _fails(self, w: Workload, prop: str) -> bool:
        engine = self.pool.fresh() if self.pool.cheap else self.pool.acquire()[0]
        return self._attempt(engine, w, prop) is not None

    def verify(self, w: Workload, prop: str) -> None:
        """Run w on a pooled engine and judge prop; a failure on a reused engine is confirmed
        on a fresh one so that the verdict depends on the workload alone (Hypothesis replays
        and shrinks it)."""
        __tracebackhide__ = True
        engine, fresh = self.pool.acquire()
        history = self.pool.history(engine)
        failure = self._attempt(engine, w, prop)
        if failure is not None and not fresh:
            first, failure = failure, self._attempt(self.pool.fresh(), w, prop)
            if failure is None and not self.history_failures:
                self.history_failures.append(self._leak_report(first, history, w, prop))
        if failure is not None:
            # One raise site, outside any except block: Hypothesis then sees every failure
            # of this property as one bug and shrinks toward the smallest counterexample.
            raise self.explain(failure, w)
        self.examples += 1

    # -- one property -------------------------------------------------------------------------
    def settings(self, **overrides: Any) -> settings:
        """The current Hypothesis profile, minus what cannot suit a whole engine run."""
        kw = {"deadline": None, "suppress_health_check": _SUPPRESS, **self.overrides}
        return settings(**{**kw, **overrides})

    def strategy(self, prop: str) -> Any:
        bad = (1, 2) if prop == "bad_input" else (0, 1)
        return workloads(self.limits, alone=self.oracle.tokens, min_bad=bad[0], max_bad=bad[1])

    def check(self, prop: str) -> None:
        """Seed workloads first (deterministic), then a Hypothesis search over workloads."""
        __tracebackhide__ = True
        if prop == "stateful":
            from engines.testing.stateful import run_engine_machine

            run_engine_machine(self)
            return
        if prop in SLOT_PROPERTIES and self.limits.max_batch_size is None:
            raise LookupError(f"{prop} needs engines.protocol.SlotIntrospection")
        seeds = seed_workloads(self.limits, bad=prop == "bad_input", alone=self.oracle.tokens)
        for w in seeds if self.use_seeds else ():
            if self._fails(w, prop):
                self.verify(shrink_workload(w, lambda c: self._fails(c, prop)), prop)
                self.verify(w, prop)  # only if the shrunk one did not fail on replay

        @self.settings()
        @given(self.strategy(prop))
        def check_workload(workload: Workload) -> None:
            self.verify(workload, prop)

        inner: Any = check_workload.hypothesis.inner_test  # type: ignore[attr-defined]
        inner._hypothesis_internal_add_digest = f"{self.name}-{prop}".encode()
        self.history_failures.clear()
        check_workload()
        if self.history_failures:
            raise Violation(prop, self.history_failures[0])
