"""The plugin's options: registered under namespaced names, with the short generic names as
aliases where no other plugin of the run has them, and read once per session into one frozen
object (engine factories loaded there, once).

A pytest11 plugin shares the command line with every other plugin of the environment, and
argparse refuses an option string registered twice: a plugin of its own that defines `--engine`
would stop pytest at start-up. So each option's own name is `--batching-...`; its generic alias
(`--engine`, `--parity`, ...) is added after the initial conftests are loaded (plugin.py's
pytest_load_initial_conftests wrapper), only where nobody registered it first: a `-p` plugin,
another pytest11 plugin or a conftest.py that defines `--engine` keeps it, and the suite is run
with `--batching-engine`. Values land in `batching_*` dests, which no other plugin shares.

Imports only pytest at load time (the plugin must change nothing in runs that do not use it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from engines.protocol import Engine

Factory = Callable[[], "Engine"]

# ini key (also the name in messages) -> (namespaced flag, generic alias, argparse attributes).
ENGINE = "engine"
REFERENCE = "reference_engine"
INDEPENDENT = "independent_reference"
INDEPENDENT_SETTINGS = ("auto", "off")
VARIANTS = "engine_variants"
PARITY = "parity"
TOLERANCE = "parity_tolerance"
STEP_TIMEOUT = "step_timeout"
TORCH_THREADS = "torch_threads"
SHRINK_BUDGET = "shrink_budget"
PROGRESS = "progress_interval"
PARITY_MODES = ("auto", "exact", "tie-aware")
DEST_PREFIX = "batching_"

_FLAGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    ENGINE: ("--batching-engine", "--engine", {
        "metavar": "MODULE:CALLABLE",
        "help": "engine factory to run engines.testing.conformance on"}),
    REFERENCE: ("--batching-reference-engine", "--reference-engine", {
        "metavar": "MODULE:CALLABLE",
        "help": "reference engine factory over the same weights: every greedy request must get "
        "the tokens it gets there alone (check reference_parity; e.g. "
        "engines.sequential:SequentialEngine)"}),
    INDEPENDENT: ("--batching-independent-reference", "--independent-reference", {
        "metavar": "auto|off|MODULE:CALLABLE",
        "help": "which reference judges the requests that use a feature beyond the base "
        "fields: auto (default: the reference engine's independent twin, where it names one: "
        "engines.sequential's is engines.independent), off (the reference engine judges "
        "all), or an independent reference factory"}),
    VARIANTS: ("--batching-engine-variant", "--engine-variant", {
        "action": "append", "default": [], "metavar": "NAME=MODULE:CALLABLE",
        "help": "a config variant of the engine (repeatable): the same workload must give every "
        "request the same tokens on it (check variants)"}),
    PARITY: ("--batching-parity", "--parity", {
        "choices": PARITY_MODES,
        "help": "parity comparison: auto (default: exact where every engine compared declares "
        "float32 or batch invariance, else tie-aware), exact, or tie-aware (accept divergences "
        "at near-ties, judged from top_logprobs)"}),
    TOLERANCE: ("--batching-parity-tolerance", "--parity-tolerance", {
        "type": float, "metavar": "LOGPROB",
        "help": "tie-aware: largest logprob gap that counts as a tie (default: derived from "
        "the dtypes the engines declare, 1e-3 at float32, 0.125 at bfloat16)"}),
    STEP_TIMEOUT: ("--batching-step-timeout", "--step-timeout", {
        "type": float, "metavar": "SECONDS",
        "help": "fail a protocol call that runs longer than this (default 60)"}),
    TORCH_THREADS: ("--batching-torch-threads", "--torch-threads", {
        "metavar": "N",
        "help": "set torch's intra-op threads in this process to N before building engines "
        "(default: leave them; 1 runs small CPU models far faster on a busy machine)"}),
    SHRINK_BUDGET: ("--batching-shrink-budget", "--shrink-budget", {
        "metavar": "SECONDS",
        "help": "stop shrinking a check's failure after this long and report the smallest "
        "example found by then, saying so (default 60; 0: report it unshrunk)"}),
    PROGRESS: ("--batching-progress-interval", "--progress-interval", {
        "metavar": "SECONDS",
        "help": "say what a running check is doing at least this often (default 30; 0: no "
        "progress lines)"}),
}
_INI: dict[str, tuple[str, Any]] = {
    ENGINE: ("engine factory module:callable for the conformance suite", None),
    REFERENCE: ("reference engine factory module:callable (reference_parity)", None),
    INDEPENDENT: ("auto, off or module:callable: who judges the reference engine's features "
                  "(--independent-reference)", "auto"),
    VARIANTS: ("config variants, one NAME=module:callable a line (variants)", []),
    PARITY: ("parity comparison: auto, exact or tie-aware", "auto"),
    TOLERANCE: ("tie-aware parity tolerance (logprob gap; default: from the declared dtypes)",
                None),
    STEP_TIMEOUT: ("seconds a protocol call may take", "60"),
    TORCH_THREADS: ("torch intra-op threads in the suite's process (--torch-threads)", None),
    SHRINK_BUDGET: ("seconds a check may spend shrinking a failure", "60"),
    PROGRESS: ("seconds between a running check's progress lines (0: none)", "30"),
}
GROUP = "batching-engines"


def dest(name: str) -> str:
    """Where argparse puts the option's value: `batching_engine`, ..."""
    return DEST_PREFIX + name


def add_options(parser: pytest.Parser) -> None:
    """The namespaced options and the ini keys (pytest_addoption)."""
    group = parser.getgroup(GROUP, "batching-engines conformance suite")
    for name, (flag, alias, attrs) in _FLAGS.items():
        group.addoption(flag, dest=dest(name), **{
            **attrs, "help": f"{attrs['help']} (alias {alias} where no other plugin has it)"})
    for name, (text, default) in _INI.items():
        if name == VARIANTS:
            parser.addini(name, text, type="linelist", default=default)
        elif default is None:
            parser.addini(name, text)
        else:
            parser.addini(name, text, default=default)


def add_aliases(parser: pytest.Parser) -> tuple[str, ...]:
    """Add each generic alias nobody registered first; return those added."""
    group = parser.getgroup(GROUP)
    added = []
    for name, (_, alias, attrs) in _FLAGS.items():
        try:
            group.addoption(alias, dest=dest(name), **{**attrs, "help": argparse.SUPPRESS})
        except (argparse.ArgumentError, ValueError):
            # Another plugin's option (argparse: "conflicting option string"; pytest, within
            # one group: "option names ... already added"): it keeps the name.
            continue
        added.append(alias)
    return tuple(added)


def flag(name: str, aliases: tuple[str, ...] = ()) -> str:
    """How to write the option on this run's command line: the alias where it is ours."""
    namespaced, alias, _ = _FLAGS[name]
    return alias if alias in aliases else namespaced


@dataclass(frozen=True)
class RunOptions:
    """The suite's options for this session, read once in pytest_configure; the factories the
    specs name, loaded once."""

    engine_spec: str | None = None
    engine: Factory | None = None
    reference_spec: str | None = None
    reference: Factory | None = None
    independent: str = "auto"  # auto, off, or the spec of `independent_factory`
    independent_factory: Factory | None = None
    variant_specs: tuple[str, ...] = ()
    variants: Mapping[str, Factory] = field(default_factory=dict)
    parity: str = "auto"
    tolerance: float | None = None  # None: derived from the engines' declared dtypes
    step_timeout: float | None = 60.0
    torch_threads: int | None = None  # torch's intra-op threads, set before engines are built
    aliases: tuple[str, ...] = ()  # the generic option names this run gave the suite
    shrink_budget: int = 60  # seconds a check may shrink a failure (testing.shrink_budget)
    progress_interval: float = 30.0  # seconds between progress lines (testing.progress_lines)

    def flag(self, name: str) -> str:
        return flag(name, self.aliases)

    @property
    def used(self) -> bool:
        """Whether the run names anything for the suite (else it is not loaded at all)."""
        return bool(self.engine_spec or self.reference_spec or self.variant_specs)


def _value(config: pytest.Config, name: str) -> Any:
    value = config.getoption(dest(name), None)
    return value if value not in (None, "", []) else config.getini(name)


def _number(config: pytest.Config, name: str, aliases: tuple[str, ...]) -> float:
    value = _value(config, name)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{name} ({flag(name, aliases)}): {value!r} is not a "
                                "number") from None


def _threads(config: pytest.Config, aliases: tuple[str, ...]) -> int | None:
    value = _value(config, TORCH_THREADS)
    if value in (None, ""):
        return None
    try:
        threads = int(value)
    except (TypeError, ValueError):
        threads = 0
    if threads < 1:
        raise pytest.UsageError(f"torch_threads: {value!r} is not a whole number of at least 1 "
                                f"({flag(TORCH_THREADS, aliases)} or the ini key)")
    return threads


def _seconds(config: pytest.Config, name: str, aliases: tuple[str, ...]) -> float:
    value = _number(config, name, aliases)
    if value < 0:
        raise pytest.UsageError(f"{name} ({flag(name, aliases)}): {value!r} is negative; "
                                "expected seconds, or 0")
    return value


def read_options(config: pytest.Config, aliases: tuple[str, ...]) -> RunOptions:
    """Every option and ini key, checked and with its factories loaded; a bad one is a usage
    error that names it and its value."""
    parity = str(_value(config, PARITY))
    if parity not in PARITY_MODES:
        raise pytest.UsageError(f"parity: {parity!r} is not one of {PARITY_MODES}")
    given = _value(config, TOLERANCE)
    tolerance = None if given in (None, "") else _number(config, TOLERANCE, aliases)
    step_timeout = _number(config, STEP_TIMEOUT, aliases) or None
    torch_threads = _threads(config, aliases)
    # Whole seconds: Hypothesis' own bound (MAX_SHRINKING_SECONDS) is an int.
    shrink_budget = round(_seconds(config, SHRINK_BUDGET, aliases))
    progress_interval = _seconds(config, PROGRESS, aliases)
    engine_spec = str(_value(config, ENGINE) or "") or None
    reference_spec = str(_value(config, REFERENCE) or "") or None
    independent = str(_value(config, INDEPENDENT) or "auto")
    if independent not in INDEPENDENT_SETTINGS and ":" not in independent:
        raise pytest.UsageError(f"{INDEPENDENT} ({flag(INDEPENDENT, aliases)}): {independent!r} "
                                "is not auto, off or MODULE:CALLABLE")
    variant_specs = tuple(str(v) for v in _value(config, VARIANTS) or ())
    options = RunOptions(engine_spec=engine_spec, reference_spec=reference_spec,
                         independent=independent, variant_specs=variant_specs, parity=parity,
                         tolerance=tolerance,
                         step_timeout=step_timeout, torch_threads=torch_threads,
                         aliases=aliases, shrink_budget=shrink_budget,
                         progress_interval=progress_interval)
    if not options.used:
        return options
    from engines.factories import EngineSpecError, load_factory, split_label

    try:
        engine = load_factory(engine_spec, option=options.flag(ENGINE)) if engine_spec else None
        reference = (load_factory(reference_spec, option=options.flag(REFERENCE))
                     if reference_spec else None)
        twin = (None if independent in INDEPENDENT_SETTINGS else
                load_factory(independent, option=options.flag(INDEPENDENT)))
        if twin is not None and reference is None:
            raise EngineSpecError(f"{options.flag(INDEPENDENT)} {independent}: needs "
                                  f"{options.flag(REFERENCE)}, the reference it takes features "
                                  "from")
        variants = {}
        variant_flag = options.flag(VARIANTS)
        for spec in variant_specs:
            vname, target = split_label(spec)
            if not vname:
                raise EngineSpecError(f"{variant_flag} {spec!r}: expected NAME=MODULE:CALLABLE")
            variants[vname] = load_factory(target, option=f"{variant_flag} {vname}")
    except EngineSpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    return RunOptions(engine_spec=engine_spec, engine=engine, reference_spec=reference_spec,
                      reference=reference, independent=independent,
                      independent_factory=twin, variant_specs=variant_specs, variants=variants,
                      parity=parity, tolerance=tolerance, step_timeout=step_timeout,
                      torch_threads=torch_threads, aliases=aliases,
                      shrink_budget=shrink_budget, progress_interval=progress_interval)
