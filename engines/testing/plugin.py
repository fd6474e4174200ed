"""pytest plugin (the `pytest11` entry point): options, ini keys, fixtures and test ids for
the conformance suite.

A pytest11 plugin loads into EVERY pytest run of the environment, so loading it must change
nothing a run that does not use the suite could notice: this module imports only pytest at
load time (not Hypothesis, not torch, not the suite), registers its Hypothesis profiles only
when a `batching-*` profile is asked for, and prints its header only when conformance tests
were collected. Everything else happens inside hooks that only the suite's own tests reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from engines.protocol import Engine
    from engines.testing.context import SuiteContext

ENGINE = "engine"
REFERENCE = "reference_engine"
VARIANTS = "engine_variants"
PARITY = "parity"
TOLERANCE = "parity_tolerance"
STEP_TIMEOUT = "step_timeout"
TORCH_THREADS = "torch_threads"
PARITY_MODES = ("exact", "tie-aware")
PROFILE_PREFIX = "batching-"

_NO_ENGINE = (
    "the conformance suite has no engine to test. Pass --engine module:callable (a "
    "zero-argument callable returning a fresh engine), set `engine = module:callable` in the "
    "[pytest] ini section, or override the `engine_factory` fixture in your conftest.py."
)

_contexts = pytest.StashKey[dict[tuple[int, ...], "SuiteContext"]]()
COVERAGE = "batching-engines coverage"  # user_properties key: what a check exercised


@dataclass(frozen=True)
class EngineCase:
    """One engine the suite runs on: its name in test ids, and its factory (None: take it
    from the `engine_factory` fixture, which a conftest.py may override)."""

    name: str
    factory: Callable[[], Engine] | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("batching-engines", "batching-engines conformance suite")
    group.addoption(f"--{ENGINE}", dest=ENGINE, metavar="MODULE:CALLABLE",
                    help="engine factory to run engines.testing.conformance on")
    group.addoption("--reference-engine", dest=REFERENCE, metavar="MODULE:CALLABLE",
                    help="reference engine factory over the same weights: every greedy "
                    "request must get the tokens it gets there alone (check "
                    "reference_parity; e.g. engines.sequential:SequentialEngine)")
    group.addoption("--engine-variant", dest=VARIANTS, action="append", default=[],
                    metavar="NAME=MODULE:CALLABLE",
                    help="a config variant of the engine (repeatable): the same workload must "
                    "give every request the same tokens on it (check variants)")
    group.addoption(f"--{PARITY}", dest=PARITY, choices=PARITY_MODES,
                    help="parity comparison: exact (default) or tie-aware (accept divergences "
                    "at near-ties, judged from top_logprobs)")
    group.addoption("--parity-tolerance", dest=TOLERANCE, type=float, metavar="LOGPROB",
                    help="tie-aware: largest logprob gap that counts as a tie (default 1e-3)")
    group.addoption("--step-timeout", dest=STEP_TIMEOUT, type=float, metavar="SECONDS",
                    help="fail a protocol call that runs longer than this (default 60)")
    group.addoption("--torch-threads", dest=TORCH_THREADS, metavar="N",
                    help="set torch's intra-op threads in this process to N before building "
                    "engines (default: leave them; 1 runs small CPU models far faster on a "
                    "busy machine)")
    parser.addini(ENGINE, "engine factory module:callable for the conformance suite")
    parser.addini(REFERENCE, "reference engine factory module:callable (reference_parity)")
    parser.addini(VARIANTS, "config variants, one NAME=module:callable a line (variants)",
                  type="linelist", default=[])
    parser.addini(PARITY, "parity comparison: exact or tie-aware", default="exact")
    parser.addini(TOLERANCE, "tie-aware parity tolerance (logprob gap)", default="1e-3")
    parser.addini(STEP_TIMEOUT, "seconds a protocol call may take", default="60")
    parser.addini(TORCH_THREADS, "torch intra-op threads in the suite's process (--torch-threads)")


def _opt(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name, None)
    return value if value not in (None, "") else config.getini(name)


def _spec(config: pytest.Config, name: str = ENGINE) -> str | None:
    spec = _opt(config, name)
    return str(spec) if spec else None


def _torch_threads(config: pytest.Config) -> int | None:
    value = _opt(config, TORCH_THREADS)
    if value in (None, ""):
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise pytest.UsageError(f"torch_threads: {value!r} is not a whole number of at least 1")
    return threads


def _variant_specs(config: pytest.Config) -> list[str]:
    return list(config.getoption(VARIANTS, None) or config.getini(VARIANTS) or [])


def _load_variants(config: pytest.Config) -> dict[str, Callable[[], Engine]]:
    from engines.factories import EngineSpecError, load_factory, split_label

    out = {}
    for spec in _variant_specs(config):
        name, target = split_label(spec)
        if not name:
            raise EngineSpecError(f"--engine-variant {spec!r}: expected NAME=MODULE:CALLABLE")
        out[name] = load_factory(target, option=f"--engine-variant {name}")
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before Hypothesis' own pytest_configure loads the profile that --hypothesis-profile names.
    profile = config.getoption("hypothesis_profile", None)
    if isinstance(profile, str) and profile.startswith(PROFILE_PREFIX):
        from engines.testing.profiles import register_profiles

        register_profiles()
    config.stash[_contexts] = {}
    if _opt(config, PARITY) not in PARITY_MODES:
        raise pytest.UsageError(f"parity: {_opt(config, PARITY)!r} is not one of {PARITY_MODES}")
    _torch_threads(config)
    spec, reference = _spec(config), _spec(config, REFERENCE)
    if spec or reference or _variant_specs(config):
        from engines.factories import EngineSpecError, load_factory

        try:
            if spec:
                load_factory(spec)
            if reference:
                load_factory(reference, option="--reference-engine")
            _load_variants(config)
        except EngineSpecError as exc:
            raise pytest.UsageError(str(exc)) from None


def _is_conformance(item: pytest.Item) -> bool:
    return "conformance_check" in getattr(item, "fixturenames", ())


def pytest_report_collectionfinish(config: pytest.Config,
                                   items: list[pytest.Item]) -> list[str]:
    """What is under test, printed only in runs that collected the suite."""
    if not any(_is_conformance(item) for item in items):
        return []
    from hypothesis import settings

    spec = _spec(config) or "engine_factory fixture"
    mode = _opt(config, PARITY)
    reference = _spec(config, REFERENCE)
    if mode == "tie-aware":
        mode += f" (tolerance {_opt(config, TOLERANCE)}; margins from " + (
            "the reference engine)" if reference else "the engine's own logprobs)")
    profile = settings.get_current_profile_name()
    lines = [f"batching-engines: engine {spec}, parity {mode}, hypothesis profile {profile!r}"]
    if reference:
        lines.append(f"batching-engines: reference engine {reference}")
    if _variant_specs(config):
        lines.append(f"batching-engines: variants {', '.join(_variant_specs(config))}")
    for ctx in config.stash[_contexts].values():
        lines.extend(f"  {ctx.name}-{check}: {fate.status}: {fate.reason}"
                     for check, fate in ctx.checks.items() if fate.status != "run")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the conformance checks exercised, per engine, and why any did not run: a pass says
    how much it covered, and nothing is skipped silently. -v adds a line per check."""
    from engines.testing.coverage import Coverage

    engines: dict[str, tuple[Coverage, list[str], list[str]]] = {}
    for kind in ("passed", "skipped", "xfailed", "failed", "xpassed"):
        for report in terminalreporter.stats.get(kind, ()):
            props = dict(getattr(report, "user_properties", ()))
            check_id = props.get("batching-engines check")
            if check_id is None or getattr(report, "when", "call") == "teardown":
                continue
            engine, _, check = str(check_id).rpartition("-")
            total, passed, other = engines.setdefault(engine, (Coverage(), [], []))
            if kind == "passed" and COVERAGE in props:
                total.merge(Coverage.from_dict(props[COVERAGE]))
                passed.append(check)
                if terminalreporter.verbosity > 0:
                    other.append(f"  {check}: {Coverage.describe(props[COVERAGE])}")
            elif kind == "skipped":
                reason = str(report.longrepr[-1]).removeprefix("Skipped: ")
                other.append(f"  {check} not run: {reason}")
            elif kind == "xfailed":
                other.append(f"  {check} declared broken by the engine: {report.wasxfail}")
    if not engines:
        return
    terminalreporter.write_sep("-", "batching-engines: what the checks exercised")
    for engine, (total, passed, other) in engines.items():
        if passed:
            terminalreporter.write_line(f"{engine}: {len(passed)} check(s) passed over "
                                        f"{Coverage.describe(total.as_dict())}")
        for line in other:
            terminalreporter.write_line(line if passed else f"{engine}:{line}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    from engines.factories import engine_name, load_factory
    from engines.testing.checks import CHECKS

    listed = getattr(metafunc.module, "conformance_engines", None)
    spec = _spec(metafunc.config)
    if listed:  # a module testing several engines: {name: factory}
        cases = [EngineCase(name, f) for name, f in listed.items()]
    elif spec:
        factory = load_factory(spec)
        cases = [EngineCase(engine_name(factory), factory)]
    else:
        cases = [EngineCase(getattr(metafunc.module, "conformance_engine_name", "engine"))]
    metafunc.parametrize(
        ["conformance_engine", "conformance_check"],
        [(c, check) for c in cases for check in CHECKS],
        ids=[f"{c.name}-{check}" for c in cases for check in CHECKS],
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # No engine, or not an engine: a usage error up front beats one error per check.
    spec = _spec(config)
    if spec and not config.option.collectonly and any(_is_conformance(i) for i in items):
        from engines.factories import EngineSpecError, engine_name, load_factory

        factory = load_factory(spec)
        try:
            context_for(config, factory, engine_name(factory), spec, _reference(config),
                        _load_variants(config))
        except EngineSpecError as exc:
            raise pytest.UsageError(str(exc)) from None
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("conformance_engine") if callspec else None
        if not isinstance(case, EngineCase) or case.factory is not None or spec:
            continue
        defs = item._fixtureinfo.name2fixturedefs.get("engine_factory", ())  # type: ignore[attr-defined]
        if defs and getattr(defs[-1].func, "__module__", None) == __name__:
            raise pytest.UsageError(_NO_ENGINE)


def _reference(config: pytest.Config) -> Callable[[], Engine] | None:
    spec = _spec(config, REFERENCE)
    if not spec:
        return None
    from engines.factories import load_factory

    return load_factory(spec, option="--reference-engine")


def context_for(config: pytest.Config, factory: Callable[[], Engine], name: str,
                spec: str | None, reference: Callable[[], Engine] | None,
                variants: dict[str, Callable[[], Engine]]) -> SuiteContext:
    """One SuiteContext per factory (and reference and variants) for the whole session:
    engines and alone answers are built once and shared by every check."""
    from engines.testing.context import SuiteOptions, build_context

    contexts = config.stash[_contexts]
    key = (id(factory), id(reference), *(id(v) for v in variants.values()))
    ctx = contexts.get(key)
    if ctx is None or ctx.factory is not factory:
        options = SuiteOptions(
            parity=_opt(config, PARITY),
            tolerance=float(_opt(config, TOLERANCE)),
            step_timeout=float(_opt(config, STEP_TIMEOUT)) or None,
            reference=reference,
            reference_spec=_spec(config, REFERENCE),
            variants=variants,
            torch_threads=_torch_threads(config),
        )
        ctx = contexts[key] = build_context(factory, name=name, spec=spec, options=options)
    return ctx


@pytest.fixture
def conformance_engine() -> EngineCase:
    """Parametrized by the plugin; this default only names the engine."""
    return EngineCase("engine")


@pytest.fixture
def engine_factory(
    conformance_engine: EngineCase, pytestconfig: pytest.Config
) -> Callable[[], Engine]:
    """A zero-argument callable returning a fresh engine. Override it in your conftest.py to
    run the suite on your engine; by default it comes from --engine or the `engine` ini key."""
    if conformance_engine.factory is not None:
        return conformance_engine.factory
    spec = _spec(pytestconfig)
    if not spec:
        raise pytest.UsageError(_NO_ENGINE)
    from engines.factories import load_factory

    return load_factory(spec)


@pytest.fixture
def reference_factory(pytestconfig: pytest.Config) -> Callable[[], Engine] | None:
    """The reference engine's factory (--reference-engine or the `reference_engine` ini key),
    or None. Override it in your conftest.py to give the suite a reference."""
    return _reference(pytestconfig)


@pytest.fixture
def engine_variants(pytestconfig: pytest.Config) -> dict[str, Callable[[], Engine]]:
    """Config variants of the engine by name (--engine-variant or the `engine_variants` ini
    key). Override it in your conftest.py to compare variants."""
    return _load_variants(pytestconfig)


@pytest.fixture
def conformance_context(
    engine_factory: Callable[[], Engine],
    reference_factory: Callable[[], Engine] | None,
    engine_variants: dict[str, Callable[[], Engine]],
    conformance_engine: EngineCase,
    conformance_check: str,
    pytestconfig: pytest.Config,
    request: pytest.FixtureRequest,
) -> SuiteContext:
    """This factory's SuiteContext, with the check's fate applied: a skip with its reason, or
    the engine's declared expected failure as a strict xfail."""
    from engines.factories import EngineSpecError

    spec = _spec(pytestconfig) if conformance_engine.factory is None else None
    request.node.user_properties.append(
        ("batching-engines check", f"{conformance_engine.name}-{conformance_check}"))
    try:
        ctx = context_for(pytestconfig, engine_factory, conformance_engine.name, spec,
                          reference_factory, engine_variants)
    except EngineSpecError as exc:
        pytest.fail(str(exc), pytrace=False)
    fate = ctx.checks[conformance_check]
    if fate.status == "skip":
        pytest.skip(fate.reason)
    if fate.status == "xfail":
        request.applymarker(pytest.mark.xfail(reason=fate.reason, strict=True))
    return ctx
