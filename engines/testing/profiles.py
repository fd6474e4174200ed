"""Hypothesis profiles for the suite, under names of their own: batching-dev, batching-ci and
batching-thorough, and the rule that picks the one the suite's checks run under.

Hypothesis' own profiles (default, ci, ...) are never touched, and no profile is ever loaded
globally here: the suite's checks get the Settings object of the profile in force
(`suite_settings`), and every other test of the run keeps whatever profile Hypothesis has
loaded. The profiles are registered only when a run asks for one (the plugin does it before
Hypothesis loads the profile named by --hypothesis-profile) or the suite is collected.

The rule, the same whichever way the suite is run (--engine, the `engine` ini key, a fixture
override in a user's own tests; editable or wheel install; from any directory):

1. --hypothesis-profile NAME, if given (Hypothesis also loads it for the run's other tests);
2. else the HYPOTHESIS_PROFILE environment variable, if set and not empty (the suite's only);
3. else the `conformance_profile` ini key, if set (the repo sets batching-dev in its own
   pyproject.toml, so that its own test run stays fast on CI machines too);
4. else the suite's default: batching-ci where the CI environment variable is set (to
   anything, as Hypothesis' own CI detection reads it), else batching-dev.

A profile that a conftest.py loads with settings.load_profile() is not one of these: the
suite's checks keep the rule's profile, and the plugin's header says which profile the rest
of the run has.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.errors import InvalidArgument

if TYPE_CHECKING:
    import pytest

__all__ = ["DEFAULT_CI", "DEFAULT_DEV", "INI", "PROFILES", "ProfileInForce", "default_profile",
           "register_profiles", "resolve_profile", "suite_settings"]

PROFILES = ("batching-dev", "batching-ci", "batching-thorough")
DEFAULT_DEV, DEFAULT_CI = "batching-dev", "batching-ci"
ENV = "HYPOTHESIS_PROFILE"
INI = "conformance_profile"
FLAG = "--hypothesis-profile"
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def register_profiles() -> None:
    """Register the batching-* profiles that are not registered yet (a user who registered one
    of these names first keeps theirs)."""
    # dev: a laptop run in seconds; the seed workloads carry the known-hard cases.
    _register("batching-dev", max_examples=4, stateful_step_count=12, deadline=None,
              suppress_health_check=_SLOW)
    # ci: derandomized so a run is reproducible from the log, more examples, and the
    # @reproduce_failure blob printed beside the runnable snippet.
    _register("batching-ci", max_examples=40, stateful_step_count=30, deadline=None,
              derandomize=True, print_blob=True, suppress_health_check=_SLOW, database=None)
    # thorough: a nightly hunt.
    _register("batching-thorough", max_examples=400, stateful_step_count=60, deadline=None,
              print_blob=True, suppress_health_check=_SLOW,
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


def _register(name: str, **kwargs: Any) -> None:
    try:
        settings.get_profile(name)
    except InvalidArgument:
        settings.register_profile(name, **kwargs)


def default_profile(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The suite's default profile and why: (name, source)."""
    env = os.environ if environ is None else environ
    if "CI" in env:
        return DEFAULT_CI, "the suite's default, CI set"
    return DEFAULT_DEV, "the suite's default, CI not set"


@dataclass(frozen=True, slots=True)
class ProfileInForce:
    """The profile the suite's checks run under, where it came from, and its settings."""

    name: str
    source: str  # "--hypothesis-profile", "HYPOTHESIS_PROFILE", "ini conformance_profile", ...
    settings: settings

    def describe(self) -> str:
        s = self.settings
        seed = forced_seed()
        extra = ((f", derandomized but for --hypothesis-seed={seed}, which wins" if seed is not None
                  else ", derandomized") if s.derandomize else "")
        return (f"hypothesis profile {self.name!r} (from {self.source}): {s.max_examples} "
                f"examples a check after its seed workloads, state machine up to "
                f"{s.stateful_step_count} steps{extra}")


def forced_seed() -> int | None:
    """The seed --hypothesis-seed forces on this run (None: none given). It wins over a
    derandomized profile (engines.testing.search.search_settings)."""
    from hypothesis import core

    seed = getattr(core, "global_force_seed", None)
    return None if seed is None else int(seed)


def resolve_profile(flag: str | None, environ: Mapping[str, str] | None = None,
                    ini: str | None = None) -> tuple[str, str]:
    """(name, source) of the profile in force, by the rule in this module's docstring."""
    env = os.environ if environ is None else environ
    if flag:
        return flag, FLAG
    if env.get(ENV):
        return env[ENV], ENV
    if ini:
        return ini, f"ini {INI}"
    return default_profile(env)


def _profile(name: str, source: str) -> settings:
    if name.startswith("batching-"):
        register_profiles()
    try:
        return settings.get_profile(name)
    except InvalidArgument:
        label = {ENV: f"{ENV}={name!r}", FLAG: f"{FLAG}={name!r}"}.get(
            source, f"{INI} = {name!r}")
        raise ValueError(f"{label}: no Hypothesis profile of that name is registered (the "
                         f"suite's own are {', '.join(PROFILES)})") from None


def suite_settings(config: pytest.Config) -> ProfileInForce:
    """The profile the suite's checks run under in this pytest run, with Hypothesis' own
    --hypothesis-verbosity and --hypothesis-explain applied to it as Hypothesis applies them
    to its loaded profile. Raises ValueError naming the setting when the profile does not
    exist."""
    flag = config.getoption("hypothesis_profile", None)
    ini = str(config.getini(INI) or "").strip() or None
    name, source = resolve_profile(flag if isinstance(flag, str) else None, ini=ini)
    chosen = _profile(name, source)
    verbosity = config.getoption("hypothesis_verbosity", None)
    if verbosity:
        chosen = settings(chosen, verbosity=Verbosity[verbosity])
    if config.getoption("hypothesis_explain", False) and Phase.explain not in chosen.phases:
        chosen = settings(chosen, phases=(*chosen.phases, Phase.explain))
    return ProfileInForce(name, source, chosen)
