"""pytest plugin (the `pytest11` entry point): options, ini keys, fixtures and test ids for
the conformance suite. Imports of the suite happen inside hooks, so loading stays cheap for
test runs that never touch it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from engines.testing.profiles import register_profiles

if TYPE_CHECKING:
    from engines.protocol import Engine
    from engines.testing.suite import Suite

ENGINE = "engine"
PARITY = "parity"
TOLERANCE = "parity_tolerance"
STEP_TIMEOUT = "step_timeout"
PARITY_MODES = ("exact", "tie-aware")

_NO_ENGINE = (
    "the conformance suite has no engine to test. Pass --engine module:callable (a "
    "zero-argument callable returning a fresh engine), set `engine = module:callable` in the "
    "[pytest] ini section, or override the `engine_factory` fixture in your conftest.py."
)

register_profiles()
_suites = pytest.StashKey[dict[int, "Suite"]]()


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
    group.addoption(f"--{PARITY}", dest=PARITY, choices=PARITY_MODES,
                    help="parity comparison: exact (default) or tie-aware (accept divergences "
                    "at near-ties, judged from top_logprobs)")
    group.addoption("--parity-tolerance", dest=TOLERANCE, type=float, metavar="LOGPROB",
                    help="tie-aware: largest logprob gap that counts as a tie (default 1e-3)")
    group.addoption("--step-timeout", dest=STEP_TIMEOUT, type=float, metavar="SECONDS",
                    help="fail a protocol call that runs longer than this (default 60)")
    parser.addini(ENGINE, "engine factory module:callable for the conformance suite")
    parser.addini(PARITY, "parity comparison: exact or tie-aware", default="exact")
    parser.addini(TOLERANCE, "tie-aware parity tolerance (logprob gap)", default="1e-3")
    parser.addini(STEP_TIMEOUT, "seconds a protocol call may take", default="60")


def _opt(config: pytest.Config, name: str) -> Any:
    value = config.getoption(name, None)
    return value if value not in (None, "") else config.getini(name)


def _spec(config: pytest.Config) -> str | None:
    spec = _opt(config, ENGINE)
    return str(spec) if spec else None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_suites] = {}
    if _opt(config, PARITY) not in PARITY_MODES:
        raise pytest.UsageError(f"parity: {_opt(config, PARITY)!r} is not one of {PARITY_MODES}")
    spec = _spec(config)
    if spec:
        from engines.factories import EngineSpecError, load_factory

        try:
            load_factory(spec)
        except EngineSpecError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    from hypothesis import settings

    profile = getattr(settings, "_current_profile", None) or "default"
    spec = _spec(config) or "engine_factory fixture"
    mode = _opt(config, PARITY)
    if mode == "tie-aware":
        mode += f" (tolerance {_opt(config, TOLERANCE)})"
    return f"batching-engines: engine {spec}, parity {mode}, hypothesis profile {profile!r}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    from engines.factories import engine_name, load_factory
    from engines.testing.suite import CHECKS

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
        [(c, prop) for c in cases for prop in CHECKS],
        ids=[f"{c.name}-{prop}" for c in cases for prop in CHECKS],
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # No engine, or not an engine: a usage error up front beats one error per property.
    spec = _spec(config)
    if spec and not config.option.collectonly and any(
        "conformance_check" in getattr(item, "fixturenames", ()) for item in items
    ):
        from engines.factories import EngineSpecError, load_factory

        try:
            _suite_for(config, load_factory(spec), EngineCase(spec), spec).prepare()
        except EngineSpecError as exc:
            raise pytest.UsageError(str(exc)) from None
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("conformance_engine") if callspec else None
        if not isinstance(case, EngineCase) or case.factory is not None or _spec(config):
            continue
        defs = item._fixtureinfo.name2fixturedefs.get("engine_factory", ())  # type: ignore[attr-defined]
        if defs and getattr(defs[-1].func, "__module__", None) == __name__:
            raise pytest.UsageError(_NO_ENGINE)


def _suite_for(
    config: pytest.Config, factory: Callable[[], Engine], case: EngineCase, spec: str | None
) -> Suite:
    """One Suite per factory for the whole session: engines and alone results are reused."""
    from engines.testing.suite import Suite

    suites = config.stash[_suites]
    suite = suites.get(id(factory))
    if suite is None or suite.factory is not factory:
        suite = suites[id(factory)] = Suite(
            factory,
            name=case.name,
            spec=spec,
            parity=_opt(config, PARITY),
            tolerance=float(_opt(config, TOLERANCE)),
            step_timeout=float(_opt(config, STEP_TIMEOUT)) or None,
        )
    return suite


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
def conformance_suite(
    engine_factory: Callable[[], Engine],
    conformance_engine: EngineCase,
    conformance_check: str,
    pytestconfig: pytest.Config,
    request: pytest.FixtureRequest,
) -> Suite:
    """The Suite of this factory (shared across tests, so engines and alone results are
    reused), with the engine's declared expected failure applied as a strict xfail."""
    from engines.factories import EngineSpecError
    from engines.testing.properties import SLOT_PROPERTIES

    spec = _spec(pytestconfig) if conformance_engine.factory is None else None
    suite = _suite_for(pytestconfig, engine_factory, conformance_engine, spec)
    try:
        suite.prepare()
    except EngineSpecError as exc:
        pytest.fail(str(exc), pytrace=False)
    if conformance_check in SLOT_PROPERTIES and suite.limits.max_batch_size is None:
        pytest.skip(f"{conformance_check} needs engines.protocol.SlotIntrospection")
    reason = suite.expected_failures.get(conformance_check)
    if reason:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    return suite
