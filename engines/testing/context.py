"""What the suite knows about one engine factory, built once and passed to every piece.

The plugin builds one SuiteContext per factory for the whole session: the search, the failure
report and the state machine all take it, so an engine is probed once, its pools and alone
answers are shared, and no piece keeps results of its own between calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engines.protocol import Engine
from engines.testing.checks import Applicability, applicability
from engines.testing.oracle import AloneOracle, ParityMode
from engines.testing.pool import EnginePool
from engines.testing.properties import Judge
from engines.testing.strategies import EngineLimits
from engines.testing.workload import factory_source

__all__ = ["SuiteContext", "SuiteOptions", "build_context"]


@dataclass(frozen=True, slots=True)
class SuiteOptions:
    """How the suite judges, whatever the engine (the plugin's options and ini keys)."""

    parity: ParityMode = "exact"
    tolerance: float = 1e-3  # tie-aware: largest logprob gap that counts as a tie
    step_timeout: float | None = 60.0  # seconds a protocol call may take


@dataclass(frozen=True, slots=True)
class SuiteContext:
    name: str  # the engine's name in test ids and reports
    factory: Callable[[], Engine]
    pool: EnginePool  # engines that serve workloads (drained ones are reused)
    oracle: AloneOracle  # requests served alone, on engines of their own pool
    judge: Judge  # what the properties compare against
    limits: EngineLimits  # what the strategies may draw
    checks: Mapping[str, Applicability]  # every check's fate on this engine
    options: SuiteOptions
    repro_source: str  # source lines binding `make_engine` in a runnable script

    @property
    def step_timeout(self) -> float | None:
        return self.options.step_timeout

    def applies(self, check: str) -> bool:
        """The check runs (strictly xfailed ones included)."""
        return self.checks[check].status != "skip"


def build_context(
    factory: Callable[[], Engine],
    *,
    name: str = "engine",
    spec: str | None = None,
    options: SuiteOptions | None = None,
) -> SuiteContext:
    """Build one engine (which checks that it speaks the protocol), read its limits and
    declared expected failures, and set up the pools; the engine goes to the pool."""
    options = options or SuiteOptions()
    source = f"--engine {spec}" if spec else f"engine factory {name}"
    pool = EnginePool(factory, source)
    engine = pool.fresh()
    declared = dict(getattr(engine, "expected_failed_checks", {}) or {})
    logprobs = 5 if options.parity == "tie-aware" else 0
    limits = EngineLimits.of(engine, logprobs=logprobs,
                             seeded_sampling="seeds" not in declared)
    pool.release(engine)
    if not pool.cheap and (pool.build_s or 0) < 2.0:
        # The first build may have paid for loading the model (shared by later builds): time
        # a second one before deciding that engines are expensive.
        pool.release(pool.fresh())
    oracle = AloneOracle(EnginePool(factory, source), deadline=options.step_timeout)
    return SuiteContext(
        name=name,
        factory=factory,
        pool=pool,
        oracle=oracle,
        judge=Judge(oracle, options.parity, options.tolerance),
        limits=limits,
        checks=applicability(limits, declared),
        options=options,
        repro_source=factory_source(factory, spec),
    )
