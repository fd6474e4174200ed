"""The installed plugin loads into every pytest run of the environment: in a project that never
uses the suite it must change nothing. Run as a separate pytest process (the entry point loads
the plugin; the repo's conftest does not apply), with CI=true as a CI machine sets it."""

from __future__ import annotations

import pytest

UNRELATED = """
import sys

from hypothesis import given, settings, strategies as st

calls = []


def test_the_plugin_is_loaded_but_imported_nothing(request):
    assert request.config.pluginmanager.has_plugin("batching_engines")
    assert request.config.getoption("batching_engine") is None  # its options exist, unused
    for heavy in ("torch", "engines.testing.profiles", "engines.testing.context"):
        assert heavy not in sys.modules, heavy


def test_hypothesis_own_ci_profile_is_in_force():
    assert settings.get_current_profile_name() == "ci"
    assert settings().max_examples == 100 and settings().derandomize


@given(st.integers())
def test_draws(x):
    calls.append(x)


def test_hypothesis_ran_its_own_number_of_examples():
    assert len(calls) == 100
"""


@pytest.fixture
def ci_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)


@pytest.mark.usefixtures("ci_env")
def test_an_unrelated_project_is_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unrelated=UNRELATED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    # pytest itself lists the installed plugin ("plugins: ... batching-engines-0.1.0"); the
    # plugin's own header line must not appear.
    assert "batching-engines:" not in result.stdout.str() + result.stderr.str()


@pytest.mark.usefixtures("ci_env")
def test_the_suites_profiles_are_there_when_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_profile="""
        from hypothesis import settings

        def test_profile():
            assert settings.get_current_profile_name() == "batching-ci"
            assert settings().max_examples == 40
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                           "--hypothesis-profile=batching-ci")
    result.assert_outcomes(passed=1)
