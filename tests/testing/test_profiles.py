"""The rule that picks the suite's Hypothesis profile (engines.testing.profiles), on its own:
what wins over what, what the header says, and the errors for a profile that does not exist.
The same rule seen from outside, through real pytest runs, is
tests/testing/test_profile_in_force.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import Phase, Verbosity
from hypothesis import settings as Settings

from engines.testing.profiles import ProfileInForce, resolve_profile, suite_settings


@pytest.mark.parametrize(
    ("flag", "environ", "ini", "expected"),
    [
        (None, {}, None, ("batching-dev", "the suite's default, CI not set")),
        (None, {"CI": "true"}, None, ("batching-ci", "the suite's default, CI set")),
        (None, {"CI": ""}, None, ("batching-ci", "the suite's default, CI set")),
        (None, {"CI": "1"}, "batching-thorough", ("batching-thorough", "ini conformance_profile")),
        (None, {"HYPOTHESIS_PROFILE": "batching-thorough", "CI": "1"}, "batching-dev",
         ("batching-thorough", "HYPOTHESIS_PROFILE")),
        (None, {"HYPOTHESIS_PROFILE": ""}, None, ("batching-dev",
                                                  "the suite's default, CI not set")),
        ("batching-ci", {"HYPOTHESIS_PROFILE": "batching-thorough"}, "batching-dev",
         ("batching-ci", "--hypothesis-profile")),
    ],
)
def test_the_rule(flag: str | None, environ: dict[str, str], ini: str | None,
                  expected: tuple[str, str]) -> None:
    assert resolve_profile(flag, environ, ini) == expected


class _Config:
    """What suite_settings reads of a pytest.Config."""

    def __init__(self, ini: str = "", **options: Any) -> None:
        self.option = SimpleNamespace(**options)
        self.ini = ini

    def getoption(self, name: str, default: Any = None) -> Any:
        return getattr(self.option, name, default)

    def getini(self, name: str) -> str:
        assert name == "conformance_profile"
        return self.ini


def _settings(config: _Config) -> ProfileInForce:
    return suite_settings(config)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_profile_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    monkeypatch.delenv("CI", raising=False)


def test_settings_are_the_profiles_and_nothing_is_loaded() -> None:
    before = Settings.get_current_profile_name()
    found = _settings(_Config(hypothesis_profile="batching-ci"))
    assert found.settings.max_examples == 40 and found.settings.derandomize
    assert found.describe() == (
        "hypothesis profile 'batching-ci' (from --hypothesis-profile): 40 examples a check "
        "after its seed workloads, state machine up to 30 steps, derandomized")
    assert Settings.get_current_profile_name() == before


def test_hypothesis_verbosity_and_explain_apply_to_the_suite_too() -> None:
    found = _settings(_Config(hypothesis_verbosity="verbose", hypothesis_explain=True))
    assert found.name == "batching-dev" and found.settings.max_examples == 4
    assert found.settings.verbosity == Verbosity.verbose
    assert Phase.explain in found.settings.phases


def test_a_users_own_profile_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    Settings.register_profile("test-profiles-mine", max_examples=7)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "test-profiles-mine")
    found = _settings(_Config(ini="batching-thorough"))
    assert (found.name, found.source, found.settings.max_examples) == (
        "test-profiles-mine", "HYPOTHESIS_PROFILE", 7)


@pytest.mark.parametrize(
    ("env", "ini", "message"),
    [
        ("batchng-ci", "", "HYPOTHESIS_PROFILE='batchng-ci': no Hypothesis profile of that name "
         "is registered (the suite's own are batching-dev, batching-ci, batching-thorough)"),
        (None, "batching-nightly", "conformance_profile = 'batching-nightly': no Hypothesis "
         "profile of that name is registered"),
    ],
)
def test_a_profile_that_does_not_exist_is_named(monkeypatch: pytest.MonkeyPatch,
                                                env: str | None, ini: str, message: str) -> None:
    if env:
        monkeypatch.setenv("HYPOTHESIS_PROFILE", env)
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        _settings(_Config(ini=ini))


def test_a_forced_seed_wins_over_a_derandomized_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """batching-ci is derandomized, and Hypothesis lets derandomize win over --hypothesis-seed:
    seeds 1, 2 and 3 would draw the same workloads. The suite's searches let the seed win, and
    the header says so."""
    from hypothesis import core

    from engines.testing.profiles import register_profiles
    from engines.testing.search import search_settings

    register_profiles()
    ci = Settings.get_profile("batching-ci")
    monkeypatch.setattr(core, "global_force_seed", None)
    assert search_settings(ci).derandomize
    said = ProfileInForce("batching-ci", "--hypothesis-profile", ci).describe()
    assert said.endswith(", derandomized")
    monkeypatch.setattr(core, "global_force_seed", 2)
    assert not search_settings(ci).derandomize
    assert search_settings(ci).max_examples == ci.max_examples
    said = ProfileInForce("batching-ci", "--hypothesis-profile", ci).describe()
    assert "derandomized but for --hypothesis-seed=2, which wins" in said
