"""The profile the suite's checks run under, seen from outside: real pytest processes started
from a neutral directory, each way in (--engine, the `engine` ini key, a fixture override in
the user's own tests), from the source tree (what an editable install imports: its root
conftest.py sits beside the package) and from a copy of the package alone (what a wheel
installs: no conftest.py anywhere above it). Each run asserts the header's profile and the
number of workloads the check ran: its seed workloads plus the profile's max_examples.

ci/test-wheel-profiles.sh does the same with a built wheel in a venv of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engines
from engines.testing.context import build_context
from engines.testing.profiles import resolve_profile
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from examples.toy_engine import ToyEngine

SOURCE_TREE = Path(engines.__file__).resolve().parents[1]
TOY = (Path(__file__).resolve().parents[2] / "examples" / "toy_engine.py").read_text()
CHECK = "liveness"  # one cheap search check: a run takes seconds, whatever the profile
SUITE = ("--pyargs", "engines.testing.conformance")
WAYS = ("--engine", "ini key", "fixture override")
OVERRIDE = ("import pytest\nfrom toy import ToyEngine\n\n\n@pytest.fixture\n"
            "def engine_factory():\n    return ToyEngine\n")
# The user's own Hypothesis test beside the suite: it must keep Hypothesis' profile.
OWN = """
from hypothesis import given, settings, strategies as st

calls = []


@given(st.integers())
def test_own_draws(x):
    calls.append(x)


def test_own_profile_is_untouched():
    assert settings.get_current_profile_name() == {profile!r}
    assert len(calls) == settings().max_examples == {examples}
"""


@pytest.fixture(scope="module")
def seeds() -> int:
    """How many seed workloads the check runs on the toy engine before its search."""
    ctx = build_context(ToyEngine, name="ToyEngine")
    return len(seed_workloads(drawing_of(ctx, CHECK), alone=ctx.oracle.tokens))


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Where `engines` is imported from, per install: the source tree (editable) and a copy
    of the package with no conftest.py above it (as a wheel installs it)."""
    assert (SOURCE_TREE / "conftest.py").is_file(), "the editable case needs the repo's conftest"
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(SOURCE_TREE / "engines", site / "engines",
                    ignore=shutil.ignore_patterns("__pycache__"))
    found = {"editable": SOURCE_TREE, "wheel-like": site}
    neutral = tmp_path_factory.mktemp("neutral")
    for where in found.values():  # the venv's editable finder must not win over PYTHONPATH
        out = subprocess.run([sys.executable, "-c", "import engines; print(engines.__file__)"],
                             cwd=neutral, env={**os.environ, "PYTHONPATH": str(where)},
                             capture_output=True, text=True, check=True).stdout
        assert Path(out.strip()).resolve().is_relative_to(where.resolve()), out
    return found


@pytest.fixture(autouse=True)
def neutral_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CI", "HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)


def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: Path,
              way: str, *args: str, own: str | None = None) -> pytest.RunResult:
    """The suite's check on the toy engine, one way in, `engines` imported from `where`."""
    monkeypatch.setenv("PYTHONPATH", str(where))  # pytester puts the neutral dir before it
    pytester.makepyfile(toy=TOY)
    common = ("-p", "no:cacheprovider", "-k", CHECK, *args)
    if way == "--engine":
        return pytester.runpytest_subprocess(*common, *SUITE, "--engine", "toy:ToyEngine")
    if way == "ini key":
        pytester.makeini("[pytest]\nengine = toy:ToyEngine\n")
        return pytester.runpytest_subprocess(*common, *SUITE)
    pytester.makeconftest(OVERRIDE)
    pytester.makepyfile(test_mine="from engines.testing.conformance import *  # noqa: F403\n")
    if own is not None:
        pytester.makepyfile(test_own=own)
    return pytester.runpytest_subprocess(*common + ("-k", f"{CHECK} or own"))


def workloads(result: pytest.RunResult) -> int:
    found = re.findall(r"check\(s\) passed over (\d+) workloads", result.stdout.str())
    assert len(found) == 1, result.stdout.str()
    return int(found[0])


def assert_in_force(result: pytest.RunResult, header: str, examples: int, seeds: int, *,
                    xdist: bool = False) -> None:
    assert workloads(result) == seeds + examples
    said = f"hypothesis profile {header}: {examples} examples a check after its seed workloads"
    lines = [] if xdist else [f"batching-engines: engine *, parity *, {said}, *"]
    result.stdout.fnmatch_lines([*lines, f"checks run under {said}, *"])


@pytest.mark.parametrize("install", ["editable", "wheel-like"])
@pytest.mark.parametrize("way", WAYS)
def test_the_suites_default_every_way_in(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch,
                                         installs: dict[str, Path], seeds: int, way: str,
                                         install: str) -> None:
    # Without a profile named anywhere: batching-dev for the suite's check, and the user's own
    # Hypothesis test keeps Hypothesis' default profile (100 examples).
    result = run_suite(pytester, monkeypatch, installs[install], way,
                       own=OWN.format(profile="default", examples=100))
    result.assert_outcomes(passed=3 if way == "fixture override" else 1)
    assert_in_force(result, "'batching-dev' (from the suite's default, CI not set)", 4, seeds)


def test_the_profile_is_said_under_xdist(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch,
                                         installs: dict[str, Path], seeds: int) -> None:
    # xdist's controller collects nothing and prints no header: the summary says it.
    result = run_suite(pytester, monkeypatch, installs["wheel-like"], "--engine", "-n", "2")
    result.assert_outcomes(passed=1)
    assert_in_force(result, "'batching-dev' (from the suite's default, CI not set)", 4, seeds,
                    xdist=True)


@pytest.mark.parametrize("install", ["editable", "wheel-like"])
def test_an_explicit_profile_option_wins(pytester: pytest.Pytester,
                                         monkeypatch: pytest.MonkeyPatch,
                                         installs: dict[str, Path], seeds: int,
                                         install: str) -> None:
    # The repo's conftest.py used to load batching-dev after Hypothesis applied the option.
    result = run_suite(pytester, monkeypatch, installs[install], "--engine",
                       "--hypothesis-profile=batching-ci")
    result.assert_outcomes(passed=1)
    assert_in_force(result, "'batching-ci' (from --hypothesis-profile)", 40, seeds)


def test_the_environment_variable_wins(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch,
                                       installs: dict[str, Path], seeds: int) -> None:
    # HYPOTHESIS_PROFILE is the suite's: Hypothesis does not read it, the user's tests keep
    # Hypothesis' default. (Every way in resolves the profile by the same function.)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "batching-ci")
    result = run_suite(pytester, monkeypatch, installs["wheel-like"], "fixture override",
                       own=OWN.format(profile="default", examples=100))
    result.assert_outcomes(passed=3)
    assert_in_force(result, "'batching-ci' (from HYPOTHESIS_PROFILE)", 40, seeds)


def test_ci_machines_get_the_ci_profile(pytester: pytest.Pytester,
                                        monkeypatch: pytest.MonkeyPatch,
                                        installs: dict[str, Path], seeds: int) -> None:
    monkeypatch.setenv("CI", "true")
    result = run_suite(pytester, monkeypatch, installs["editable"], "fixture override",
                       own=OWN.format(profile="ci", examples=100))
    result.assert_outcomes(passed=3)
    assert_in_force(result, "'batching-ci' (from the suite's default, CI set)", 40, seeds)


def test_the_ini_key_sets_a_projects_default(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch,
                                             installs: dict[str, Path], seeds: int) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeini("[pytest]\nconformance_profile = batching-dev\n")
    result = run_suite(pytester, monkeypatch, installs["wheel-like"], "fixture override")
    result.assert_outcomes(passed=1)
    assert_in_force(result, "'batching-dev' (from ini conformance_profile)", 4, seeds)


def test_a_profile_a_conftest_loads_is_not_the_suites(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      installs: dict[str, Path],
                                                      seeds: int) -> None:
    # The user's conftest.py loads a profile of its own: their tests get it, the suite keeps
    # its rule (as it would have to with any conftest it cannot tell apart), and says so.
    result = run_suite(pytester, monkeypatch, installs["editable"], "fixture override",
                       own="from hypothesis import settings\n"
                       "settings.register_profile('mine', max_examples=7)\n"
                       "settings.load_profile('mine')\n" + OWN.format(profile="mine", examples=7))
    result.assert_outcomes(passed=3)
    assert_in_force(result, "'batching-dev' (from the suite's default, CI not set)", 4, seeds)
    result.stdout.fnmatch_lines(["batching-engines: the run's other tests have hypothesis "
                                 "profile 'mine'; pass --hypothesis-profile=mine to run the "
                                 "suite under it too"])


def test_a_profile_that_does_not_exist_is_a_usage_error(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        installs: dict[str, Path]) -> None:
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "batching-nightly")
    result = run_suite(pytester, monkeypatch, installs["editable"], "--engine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*HYPOTHESIS_PROFILE='batching-nightly': no Hypothesis profile "
                                 "of that name is registered*"])


def test_the_repos_own_run_stays_fast_on_ci_machines(pytestconfig: pytest.Config) -> None:
    # This run's own ini (pyproject.toml): the repo's `pytest -n auto` keeps batching-dev
    # where the CI variable would otherwise give batching-ci.
    assert resolve_profile(None, {"CI": "true"}, pytestconfig.getini("conformance_profile")) \
        == ("batching-dev", "ini conformance_profile")
