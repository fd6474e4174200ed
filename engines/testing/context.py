"""What the suite knows about one engine factory, built once and passed to every piece.

The plugin builds one SuiteContext per factory for the whole session: the search, the failure
report and the state machine all take it, so an engine is probed once, its pools, alone
answers and workload runs are shared, and no piece keeps results of its own between calls.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from engines.factories import EngineSpecError
from engines.protocol import (
    Engine,
    KVIntrospection,
    capabilities_of,
    check_declarations,
)
from engines.testing.checks import Applicability, applicability, draws_sampling, known_checks
from engines.testing.features.tenants import tenant_limits
from engines.testing.judging import Judge
from engines.testing.limits import EngineLimits
from engines.testing.oracle import TOP_K, AloneOracle, ParityMode
from engines.testing.pool import EnginePool
from engines.testing.precision import ParityChoice, ParitySetting, choose_parity
from engines.testing.recorder import Trace, run_workload
from engines.testing.routing import RoutedOracle, describe, twin_of
from engines.testing.runs import RunCache
from engines.testing.threads import limit_torch_threads
from engines.testing.workload import Workload, factory_source

__all__ = ["SuiteContext", "SuiteOptions", "build_context"]

Factory = Callable[[], Engine]


@dataclass(frozen=True, slots=True)
class SuiteOptions:
    """How the suite judges, whatever the engine (the plugin's options and ini keys)."""

    # auto: chosen from the engines' declared precision (engines.testing.precision); once
    # build_context has chosen, the context's options hold the mode and tolerance in force.
    parity: ParitySetting = "auto"
    tolerance: float | None = None  # tie-aware: largest logprob gap that counts as a tie
    step_timeout: float | None = 60.0  # seconds a protocol call may take
    reference: Factory | None = None  # --reference-engine
    reference_spec: str | None = None
    variants: Mapping[str, Factory] = field(default_factory=dict)  # --engine-variant
    # --independent-reference: "auto" (the reference's own twin, engines.protocol's
    # IndependentTwin, where it names one), "off", or the MODULE:CALLABLE of
    # `independent_factory`; the features it serves are judged by it (engines.testing.routing).
    independent: str = "auto"
    independent_factory: Factory | None = None
    torch_threads: int | None = None  # --torch-threads: torch's intra-op threads (None: as is)


@dataclass(frozen=True, slots=True)
class SuiteContext:
    name: str  # the engine's name in test ids and reports
    factory: Factory
    pool: EnginePool  # engines that serve workloads (drained ones are reused)
    oracle: AloneOracle  # requests served alone, on engines of their own pool
    judge: Judge  # what the properties compare against
    limits: EngineLimits  # what the strategies may draw
    checks: Mapping[str, Applicability]  # every check's fate on this engine
    options: SuiteOptions
    repro_source: str  # source lines binding `make_engine` in a runnable script
    runs: RunCache = field(default_factory=RunCache)  # traces the checks share, by workload
    # The seed every check draws its workloads under in a run that gives none (search).
    stream_seed: int = field(default_factory=lambda: random.SystemRandom().getrandbits(64))
    # Every pool of the context (the engine's, the oracle's, the reference's, the variants'),
    # closed together at the end of a session.
    pools: tuple[EnginePool, ...] = ()
    # The parity in force and why (the header and the summary state it).
    parity: ParityChoice = ParityChoice("exact", 1e-3, "default")
    # The --parity and --parity-tolerance the suite was given (options holds the choice made
    # from them): a report's script passes these, so that its choice is made the same way.
    asked: tuple[ParitySetting, float | None] = ("auto", None)

    @property
    def step_timeout(self) -> float | None:
        return self.options.step_timeout

    @property
    def routing(self) -> str | None:
        """The header's line on who judges which feature (None: no reference)."""
        reference = self.judge.reference
        if reference is None or self.options.reference is None:
            return None
        given = self.options.reference_spec or factory_source(self.options.reference, None)
        twin = reference.twin if isinstance(reference, RoutedOracle) else None
        return describe(given, twin, self.options.independent)

    def close(self) -> None:
        """Close every idle engine of every pool (the plugin calls it as pytest exits), the
        independent reference's too where one was built."""
        reference = self.judge.reference
        built = reference.pools[1:] if isinstance(reference, RoutedOracle) else ()
        for pool in (*self.pools, *built):
            pool.close()


def _variant_runner(pool: EnginePool, deadline: float | None) -> Callable[[Workload], Trace]:
    """Serves a workload on the variant; a finished run is kept, so that the checks judging
    variants (`variants` compares their tokens, `kv_accounting` their KV views) share it."""
    kept = RunCache()

    def run(w: Workload) -> Trace:
        found = kept.get(w)
        if found is not None:
            return found.trace
        engine = pool.acquire()[0]
        trace = None
        try:
            trace = run_workload(engine, w, deadline=deadline)
        finally:
            pool.release(engine, ok=trace is not None and not trace.stalled)
        kept.keep(w, trace, fresh=False, history=())
        return trace

    return run


def _seats(engine: Engine) -> int:
    """How many requests an engine runs at once, as EngineLimits.slots reads it."""
    found = EngineLimits.of(engine)
    return found.slots


def _probe(factory: Factory, source: str) -> tuple[EnginePool, Engine]:
    pool = EnginePool(factory, source)
    return pool, pool.fresh()


def _sampling_fields(engines: list[Engine]) -> frozenset[str]:
    """What every engine compared declares: drawn at any parity (under tie-aware parity a
    processed choice has its own rule: engines.testing.judging.processed)."""
    return frozenset.intersection(*(capabilities_of(e).supported_sampling for e in engines))


def build_context(factory: Factory, *, name: str = "engine", spec: str | None = None,
                  options: SuiteOptions | None = None) -> SuiteContext:
    """Build one engine of the factory (and of the reference and each variant), which checks
    that each speaks the protocol; read limits and declared expected failures; set up the
    pools. The built engines go to their pools."""
    options = options or SuiteOptions()
    limit_torch_threads(options.torch_threads)  # before any engine is built
    source = f"--engine {spec}" if spec else f"engine factory {name}"
    pool, engine = _probe(factory, source)
    others: dict[str, tuple[EnginePool, Engine]] = {}
    if options.reference is not None:
        others["reference"] = _probe(options.reference,
                                     f"--reference-engine {options.reference_spec or ''}")
    for vname, vfactory in options.variants.items():
        others[vname] = _probe(vfactory, f"--engine-variant {vname}")
    for label, (_, other) in others.items():
        if int(other.vocab_size) != int(engine.vocab_size):
            raise EngineSpecError(f"{label} engine has vocab_size {other.vocab_size} but the "
                                  f"engine under test has {engine.vocab_size}: they cannot "
                                  "serve the same requests (not the same model?)")
    for label, e in [(source, engine), *((f"{n} engine", o) for n, (_, o) in others.items())]:
        try:  # a declaration the suite cannot use (a misspelt check or field): a usage error
            check_declarations(e)
            known_checks(capabilities_of(e).expected_failed_checks)
        except ValueError as exc:
            raise EngineSpecError(f"{label}: {exc}") from None
    choice = choose_parity(options.parity, options.tolerance, {
        "engine": capabilities_of(engine),
        **{("reference engine" if n == "reference" else f"variant {n!r}"): capabilities_of(o)
           for n, (_, o) in others.items()}})
    asked = (options.parity, options.tolerance)
    options = dataclasses.replace(options, parity=choice.mode, tolerance=choice.tolerance)
    mode: ParityMode = choice.mode
    declared = dict(capabilities_of(engine).expected_failed_checks)
    limits = EngineLimits.of(
        engine,
        # Every engine compared must accept every request drawn.
        max_model_len=min(int(e.max_model_len) for e in (engine, *(o for _, o in
                                                                    others.values()))),
        logprobs=TOP_K if "tie-aware" in (mode, choice.versus_reference) else 0,
        sampling=draws_sampling(declared),
        sampling_fields=_sampling_fields([engine, *(o for _, o in others.values())]),
        min_temperature=max(capabilities_of(e).min_temperature
                            for e in (engine, *(o for _, o in others.values()))),
        refused_with_beams=frozenset().union(*(
            capabilities_of(e).refused_with_beams
            for e in (engine, *(o for _, o in others.values())))),
    )
    if not limits.thresholds:
        # The same weights (the vocabularies agree): a reference or variant that knows the
        # model's window or RoPE threshold gives the engine under test the reach too.
        for label, (_, other) in others.items():
            found = capabilities_of(other).position_thresholds
            if found:
                who = ("the reference engine" if label == "reference"
                       else f"variant {label!r}")
                limits = dataclasses.replace(limits, thresholds=tuple(sorted(found.items())),
                                             thresholds_from=who)
                break
    variant_engines = [o for n, (_, o) in others.items() if n != "reference"]
    limits = dataclasses.replace(limits, **tenant_limits(  # type: ignore[arg-type]
        engine, variant_engines, [o for _, o in others.values()]))
    pools = {(int(e.kv_total_blocks), _seats(e)) for n, (_, e) in others.items()
             if n != "reference" and isinstance(e, KVIntrospection)}
    limits = dataclasses.replace(limits, variant_pools=tuple(sorted(pools)))
    for p, e in [(pool, engine), *others.values()]:
        p.release(e)
    if not pool.cheap and (pool.build_s or 0) < 2.0:
        # The first build may have paid for loading the model (shared by later builds): time
        # a second one before deciding that engines are expensive.
        pool.release(pool.fresh())
    repro_source = factory_source(factory, spec)
    oracle = AloneOracle(EnginePool(factory, source), deadline=options.step_timeout,
                         repro_source=repro_source)
    reference = None
    reference_logprobs = "raw"
    if options.independent_factory is not None and options.reference is None:
        raise EngineSpecError(f"--independent-reference {options.independent}: needs a "
                              "reference engine (--reference-engine) to route from")
    if "reference" in others and options.reference is not None:
        ref_pool, ref_engine = others.pop("reference")
        reference_logprobs = capabilities_of(ref_engine).logprobs_of
        reference = AloneOracle(
            ref_pool, deadline=options.step_timeout,
            repro_source=factory_source(options.reference, options.reference_spec))
        twin = twin_of(ref_engine, options.independent, options.independent_factory)
        if twin is not None:  # built at the first request routed to it
            reference = RoutedOracle(reference, twin, vocab_size=int(ref_engine.vocab_size),
                                     logprobs_of=reference_logprobs)
    variant_pools = [p for p, _ in others.values()]
    variants = {n: _variant_runner(p, options.step_timeout) for n, (p, _) in others.items()}
    # Variants with a KV view of their own: kv_accounting judges their runs too (a variant
    # with a smaller pool preempts where the default engine cannot).
    kv_variants = {n: factory_source(options.variants[n], None) for n, (_, e) in others.items()
                   if isinstance(e, KVIntrospection)}
    judge = Judge(oracle, mode, choice.tolerance, reference, variants, kv_variants,
                  frozenset(declared), logprobs_of=capabilities_of(engine).logprobs_of,
                  reference_logprobs_of=reference_logprobs, vocab_size=int(engine.vocab_size),
                  relative=choice.relative, reference_rule=choice.reference_rule,
                  reference_parity=choice.reference_mode,
                  reference_value=choice.reference_value,
                  reference_relative=choice.reference_relative)
    return SuiteContext(
        name=name,
        factory=factory,
        pool=pool,
        oracle=oracle,
        judge=judge,
        limits=limits,
        checks=applicability(limits, declared, reference=reference is not None,
                             variants=bool(variants), kv_variants=bool(kv_variants)),
        options=options,
        repro_source=repro_source,
        pools=(pool, oracle.pool, *((reference.pool,) if reference is not None else ()),
               *variant_pools),
        parity=choice,
        asked=asked,
    )

