"""pytest plugin (the `pytest11` entry point): options, ini keys, fixtures and test ids for
the conformance suite.

A pytest11 plugin loads into EVERY pytest run of the environment, so loading it must change
nothing a run that does not use the suite could notice: this module imports only pytest at
load time (not Hypothesis, not torch, not the suite), registers its Hypothesis profiles only
when a `batching-*` profile is asked for, and prints its header only when conformance tests
were collected. Everything else happens inside hooks that only the suite's own tests reach.

The suite's checks run under the profile that engines.testing.profiles' rule picks, passed to
them as a Settings object: nothing here loads a profile for the run's other tests.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from engines.testing.options import ENGINE, RunOptions, add_aliases, add_options, read_options

if TYPE_CHECKING:
    from engines.protocol import Engine
    from engines.testing.context import SuiteContext
    from engines.testing.profiles import ProfileInForce

PROFILE_PREFIX = "batching-"
PROFILE_INI = "conformance_profile"  # engines.testing.profiles.INI, without importing it

# Stash keys: the suite's options, read once; the generic option names it got; its contexts.
OPTIONS = pytest.StashKey[RunOptions]()
ALIASES = pytest.StashKey[tuple[str, ...]]()
_contexts = pytest.StashKey[list["SuiteContext"]]()
_profile = pytest.StashKey["ProfileInForce"]()
# user_properties keys, set where things happen and read by the terminal summary.
CHECK = "batching-engines check"  # <engine>-<check>
FATE = "batching-engines fate"  # (status, reason): a skip or declared xfail, set as it is made
COVERAGE = "batching-engines coverage"  # what a check exercised
PROFILE = "batching-engines profile"  # the profile a check ran under
PARITY = "batching-engines parity"  # the parity a check judged by, and why
ROUTING = "batching-engines routing"  # who judged which feature (engines.testing.routing)
ROUTED = "batching-engines routed"  # requests each reference served alone in a check's run


def _no_engine(options: RunOptions) -> str:
    return (f"the conformance suite has no engine to test. Pass {options.flag(ENGINE)} "
            "module:callable (a zero-argument callable returning a fresh engine), set `engine = "
            "module:callable` in the [pytest] ini section, or override the `engine_factory` "
            "fixture in your conftest.py.")


@dataclass(frozen=True)
class EngineCase:
    """One engine the suite runs on: its name in test ids, and its factory (None: take it
    from the `engine_factory` fixture, which a conftest.py may override)."""

    name: str
    factory: Callable[[], Engine] | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    parser.addini(PROFILE_INI, "Hypothesis profile of the conformance suite's checks when "
                  "neither --hypothesis-profile nor HYPOTHESIS_PROFILE names one (default: "
                  "batching-ci where CI is set, else batching-dev)", default="")


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config,
                                  parser: pytest.Parser) -> Generator[None]:
    # The generic aliases (--engine, ...) go in last, after the -p plugins, the other pytest11
    # plugins and the initial conftests have registered theirs: whoever defined one keeps it.
    yield
    early_config.stash[ALIASES] = add_aliases(parser)


def run_options(config: pytest.Config) -> RunOptions:
    """The suite's options for this session (read in pytest_configure)."""
    return config.stash[OPTIONS]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before Hypothesis' own pytest_configure loads the profile that --hypothesis-profile names.
    profile = config.getoption("hypothesis_profile", None)
    if isinstance(profile, str) and profile.startswith(PROFILE_PREFIX):
        from engines.testing.profiles import register_profiles

        register_profiles()
    config.stash[_contexts] = []
    # A plugin loaded after the initial conftests (pytest_plugins) got no aliases.
    config.stash[OPTIONS] = read_options(config, config.stash.get(ALIASES, ()))


def pytest_unconfigure(config: pytest.Config) -> None:
    # The session's engines are done with: close the idle ones (a threaded engine's threads
    # would otherwise outlive the run, in a process that runs pytest more than once).
    for ctx in config.stash.get(_contexts, []):
        ctx.close()


def _is_conformance(item: pytest.Item) -> bool:
    return "conformance_check" in getattr(item, "fixturenames", ())


def profile_in_force(config: pytest.Config) -> ProfileInForce:
    """The Hypothesis profile (and settings) the suite's checks run under in this session,
    resolved once, after collection (a conftest.py may register the profile it names)."""
    found = config.stash.get(_profile, None)
    if found is None:
        from engines.testing.profiles import suite_settings

        try:
            found = config.stash[_profile] = suite_settings(config)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    return found


def pytest_report_collectionfinish(config: pytest.Config,
                                   items: list[pytest.Item]) -> list[str]:
    """What is under test, printed only in runs that collected the suite."""
    if not any(_is_conformance(item) for item in items):
        return []
    from hypothesis import settings

    options = run_options(config)
    spec = options.engine_spec or "engine_factory fixture"
    # The engines named on the command line are built here (the run needs them next): the
    # parity --parity=auto picks depends on the precision they declare.
    ctx = _build_named_engine(config, items)
    mode = (f"{options.parity} (chosen from the engines' declared precision as they are built)"
            if ctx is None else ctx.parity.describe())
    if ctx is not None and ctx.parity.mode == "tie-aware":
        mode = mode[:-1] + "; margins from " + (
            "the reference engine)" if options.reference_spec else "the engine's own logprobs)")
    profile = profile_in_force(config)
    lines = [f"batching-engines: engine {spec}, parity {mode}, {profile.describe()}"]
    lines += [f"batching-engines: warning: {w}" for w in (ctx.parity.warnings if ctx else ())]
    from engines.testing.untestable import announce

    lines += announce(config, ctx)  # declarations this run cannot test, and what to add
    current = settings.get_current_profile_name()
    # Hypothesis derives "<name>-with-verbose-verbosity" (and the like) from its options.
    if current.partition("-with-")[0] not in (profile.name, "default", "ci"):
        # A conftest.py loaded it: it applies to the run's other tests, not to the suite.
        lines.append(f"batching-engines: the run's other tests have hypothesis profile "
                     f"{current!r}; pass --hypothesis-profile={current} to run the suite under "
                     "it too")
    if options.reference_spec:
        routing = ctx.routing if ctx is not None else None
        lines.append(f"batching-engines: {routing or 'reference engine ' + options.reference_spec}")
    if options.variant_specs:
        lines.append(f"batching-engines: variants {', '.join(options.variant_specs)}")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What the conformance checks exercised, per engine, and why any did not run: a pass says
    how much it covered, and nothing is skipped silently. -v adds a line per check."""
    from collections import Counter

    from engines.testing.checks import summary_notes
    from engines.testing.coverage import Coverage
    from engines.testing.routing import lines as routed_lines

    engines: dict[str, tuple[Coverage, list[str], list[str]]] = {}
    routed: dict[str, Counter[str]] = {}  # engine -> requests each reference served
    seconds: dict[str, dict[str, float]] = {}  # engine -> check -> seconds its run took
    for kind in ("passed", "skipped", "xfailed", "failed", "xpassed"):
        for report in terminalreporter.stats.get(kind, ()):
            props = dict(getattr(report, "user_properties", ()))
            check_id = props.get(CHECK)
            if check_id is None or getattr(report, "when", "call") == "teardown":
                continue
            engine, _, check = str(check_id).rpartition("-")
            routed.setdefault(engine, Counter()).update(props.get(ROUTED, {}))
            total, passed, other = engines.setdefault(engine, (Coverage(), [], []))
            if getattr(report, "when", "call") == "call":
                seconds.setdefault(engine, {})[check] = float(getattr(report, "duration", 0.0))
            if kind == "passed" and COVERAGE in props:
                total.merge(Coverage.from_dict(props[COVERAGE]))
                passed.append(check)
                if terminalreporter.verbosity > 0:
                    other.append(f"  {check}: {Coverage.describe(props[COVERAGE])}")
            elif kind == "skipped":
                # Recorded by conformance_context as it skipped (a skip from elsewhere has none).
                reason = props.get(FATE, ("skip", "skipped outside the suite"))[1]
                other.append(f"  {check} not run: {reason}")
            elif kind == "xfailed":
                other.append(f"  {check} declared broken by the engine: {report.wasxfail}")
    if not engines:
        return
    terminalreporter.write_sep("-", "batching-engines: what the checks exercised")
    # From the reports, so that it is said under xdist too (the controller prints no header).
    for described in sorted(_profiles_reported(terminalreporter)):
        terminalreporter.write_line(f"checks run under {described}")
    for described in sorted(_profiles_reported(terminalreporter, PARITY)):
        terminalreporter.write_line(f"parity: {described}")
    for described in sorted(_profiles_reported(terminalreporter, ROUTING)):
        terminalreporter.write_line(f"reference: {described}")
    for engine, (total, passed, other) in engines.items():
        if passed:
            data = total.as_dict()
            terminalreporter.write_line(f"{engine}: {len(passed)} check(s) passed over "
                                        f"{Coverage.describe(data)}")
            for note in summary_notes(data):  # what was not judged, and what would change it
                terminalreporter.write_line(f"  {note}")
        for line in routed_lines(routed.get(engine, Counter())):
            terminalreporter.write_line(f"  {line}")
        for line in other:
            terminalreporter.write_line(line if passed else f"{engine}:{line}")
        if seconds.get(engine):
            terminalreporter.write_line(f"  {_times(seconds[engine])}")


def _times(seconds: dict[str, float]) -> str:
    """Each check's time, the slowest first: where a run's minutes went (a check's first
    test also pays for building its engines, counted in pytest's setup, not here)."""
    total = sum(seconds.values())
    parts = [f"{check} {s:.0f} s" for check, s in sorted(seconds.items(),
                                                          key=lambda kv: -kv[1])]
    return f"time: {total:.0f} s in the checks: {', '.join(parts)}"


def _profiles_reported(terminalreporter: Any, key: str = PROFILE) -> set[str]:
    """Every value the checks' reports recorded under `key` (the profile, the parity)."""
    return {str(props[key]) for reports in terminalreporter.stats.values()
            for report in reports
            if key in (props := dict(getattr(report, "user_properties", ())))}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    from engines.factories import engine_name
    from engines.testing.checks import catalogue

    listed = getattr(metafunc.module, "conformance_engines", None)
    options = run_options(metafunc.config)
    if listed:  # a module testing several engines: {name: factory}
        cases = [EngineCase(name, f) for name, f in listed.items()]
    elif options.engine is not None:
        cases = [EngineCase(engine_name(options.engine), options.engine)]
    else:
        cases = [EngineCase(getattr(metafunc.module, "conformance_engine_name", "engine"))]
    checks = [check.name for check in catalogue()]
    metafunc.parametrize(
        ["conformance_engine", "conformance_check"],
        [(c, check) for c in cases for check in checks],
        ids=[f"{c.name}-{check}" for c in cases for check in checks],
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # No engine or no such profile: a usage error up front beats one error per check.
    if not any(_is_conformance(i) for i in items):
        return
    profile_in_force(config)
    options = run_options(config)
    if options.engine is not None:
        return
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("conformance_engine") if callspec else None
        if not isinstance(case, EngineCase) or case.factory is not None:
            continue
        defs = item._fixtureinfo.name2fixturedefs.get("engine_factory", ())  # type: ignore[attr-defined]
        if defs and getattr(defs[-1].func, "__module__", None) == __name__:
            raise pytest.UsageError(_no_engine(options))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    # Built already where the header was printed; else (no terminal) here.
    _build_named_engine(session.config, session.items)


def _build_named_engine(config: pytest.Config, items: list[pytest.Item]) -> SuiteContext | None:
    """The context of the engine named on the command line, built once collection is done,
    not while collecting (a --collect-only run builds none): not an engine, or a reference or
    variant over another vocabulary, is then one usage error before any check runs. None where
    no engine is named (a fixture override builds it at its first check)."""
    options = run_options(config)
    if (options.engine is None or config.option.collectonly
            or not any(_is_conformance(i) for i in items)):
        return None
    from engines.factories import EngineSpecError, engine_name

    try:
        return context_for(config, options.engine, engine_name(options.engine),
                           options.engine_spec, options.reference, dict(options.variants))
    except EngineSpecError as exc:
        raise pytest.UsageError(str(exc)) from None


def context_for(config: pytest.Config, factory: Callable[[], Engine], name: str,
                spec: str | None, reference: Callable[[], Engine] | None,
                variants: dict[str, Callable[[], Engine]]) -> SuiteContext:
    """One SuiteContext per factory (and reference and variants) for the whole session, built
    at its first use: engines and alone answers are built once and shared by every check."""
    from engines.testing.context import SuiteOptions, build_context

    contexts = config.stash[_contexts]
    for ctx in contexts:  # by identity: a fixture may return a new factory object per test
        opts = ctx.options
        if (ctx.factory is factory and opts.reference is reference
                and list(opts.variants.items()) == list(variants.items())):
            return ctx
    options = run_options(config)
    ctx = build_context(factory, name=name, spec=spec, options=SuiteOptions(
        parity=options.parity,  # type: ignore[arg-type]  # one of PARITY_MODES (options)
        tolerance=options.tolerance,
        step_timeout=options.step_timeout,
        torch_threads=options.torch_threads,
        reference=reference,
        reference_spec=options.reference_spec,
        independent=options.independent,
        independent_factory=options.independent_factory,
        variants=variants,
    ))
    contexts.append(ctx)
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
    options = run_options(pytestconfig)
    if options.engine is None:
        raise pytest.UsageError(_no_engine(options))
    return options.engine


@pytest.fixture
def reference_factory(pytestconfig: pytest.Config) -> Callable[[], Engine] | None:
    """The reference engine's factory (--reference-engine or the `reference_engine` ini key),
    or None. Override it in your conftest.py to give the suite a reference."""
    return run_options(pytestconfig).reference


@pytest.fixture
def engine_variants(pytestconfig: pytest.Config) -> dict[str, Callable[[], Engine]]:
    """Config variants of the engine by name (--engine-variant or the `engine_variants` ini
    key). Override it in your conftest.py to compare variants."""
    return dict(run_options(pytestconfig).variants)


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
    the engine's declared expected failure as a strict xfail (either recorded in the test's
    user_properties as it is made, for the summary)."""
    from engines.factories import EngineSpecError

    options = run_options(pytestconfig)
    spec = options.engine_spec if conformance_engine.factory is None else None
    props = request.node.user_properties
    props.append((CHECK, f"{conformance_engine.name}-{conformance_check}"))
    props.append((PROFILE, profile_in_force(pytestconfig).describe()))
    try:
        ctx = context_for(pytestconfig, engine_factory, conformance_engine.name, spec,
                          reference_factory, engine_variants)
    except EngineSpecError as exc:
        pytest.fail(str(exc), pytrace=False)
    props.append((PARITY, ctx.parity.describe()))
    if ctx.routing is not None:
        props.append((ROUTING, ctx.routing))
    from engines.testing.untestable import say_once

    say_once(pytestconfig, ctx)  # where the header did not (a fixture's engine, xdist)
    fate = ctx.checks[conformance_check]
    if fate.status in ("skip", "xfail"):
        props.append((FATE, (fate.status, fate.reason)))
    if fate.status == "skip":
        pytest.skip(fate.reason)
    if fate.status == "xfail":
        request.applymarker(pytest.mark.xfail(reason=fate.reason, strict=True))
    return ctx
