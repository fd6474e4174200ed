"""The plugin's options, read once: namespaced names beside another plugin's `--engine`, specs
loaded once, no engine built by a collect-only run, fates recorded where they are made."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
PROFILE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev")
SUITE = (*PROFILE, "--pyargs", "engines.testing.conformance")
# Another plugin of the same environment with an `--engine` of its own.
THEIRS = """
def pytest_addoption(parser):
    parser.addoption("--engine", help="their engine, nothing to do with batching-engines")
"""
THEIR_TEST = """
def test_their_engine_option(request):
    assert request.config.getoption("engine") == "their-value"
"""
PULLS_SUITE = "from engines.testing.conformance import *  # noqa: F403\n"
COUNTING = """
from pathlib import Path

from examples.toy_engine import ToyEngine

BUILDS = Path(__file__).with_name("builds.txt")


def make_engine():
    with BUILDS.open("a") as f:
        f.write("built\\n")
    return ToyEngine()
"""


@pytest.fixture(autouse=True)
def importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def test_beside_a_conftest_that_defines_engine(pytester: pytest.Pytester) -> None:
    # The conftest registers after the pytest11 plugin: it keeps --engine, the suite runs by
    # --batching-engine, and a usage error names the option the suite has in this run.
    pytester.makeconftest(THEIRS)
    pytester.makepyfile(test_theirs=THEIR_TEST, test_suite=PULLS_SUITE)
    result = pytester.runpytest(*PROFILE, "--engine", "their-value", "--batching-engine",
                                "examples.toy_engine:ToyEngine", "-k", "their or liveness")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["batching-engines: engine examples.toy_engine:ToyEngine, *"])
    result = pytester.runpytest(*PROFILE, "--engine", "their-value")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no engine to test. Pass --batching-engine module:callable*"])
    # Only the name they took is theirs: --reference-engine is still the suite's.
    result = pytester.runpytest(*PROFILE, "--batching-engine", "examples.toy_engine:ToyEngine",
                                "--reference-engine", "examples.toy_engine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --reference-engine 'examples.toy_engine': "
                                 "expected 'module:callable'*"])


def test_beside_a_p_plugin_that_defines_engine(pytester: pytest.Pytester) -> None:
    # A -p plugin registers before the pytest11 plugins: it keeps --engine too.
    pytester.makepyfile(theirplugin=THEIRS, test_theirs=THEIR_TEST)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "theirplugin", *SUITE, "test_theirs.py", "--engine",
                                "their-value", "--batching-engine",
                                "examples.toy_engine:ToyEngine", "-k", "their or liveness")
    result.assert_outcomes(passed=2)


def test_namespaced_names_work_where_the_generic_ones_are_ours(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--batching-engine", "examples.toy_engine:ToyEngine",
                                "--batching-engine-variant",
                                "one_slot=examples.toy_engine:one_slot",
                                "--batching-parity=tie-aware", "-k", "variants")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*parity tie-aware, tolerance 0.001 (*",
                                 "batching-engines: variants one_slot=examples.toy_*"])
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine",
                                "--parity-tolerance", "lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_collect_only_builds_no_engine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(counting=COUNTING)
    builds = pytester.path / "builds.txt"
    result = pytester.runpytest(*SUITE, "--engine", "counting:make_engine", "--co")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*make_engine-liveness*"])  # ids name the factory...
    assert not builds.exists()  # ...read without building one
    result = pytester.runpytest(*SUITE, "--engine", "counting:make_engine", "-k", "liveness")
    result.assert_outcomes(passed=1)
    assert builds.exists()  # the counter counts


def test_specs_are_loaded_once(pytester: pytest.Pytester,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import engines.factories

    loaded: list[str] = []
    load = engines.factories.load_factory

    def counting_load(spec: str, **kwargs: str) -> object:
        loaded.append(spec)
        return load(spec, **kwargs)

    monkeypatch.setattr(engines.factories, "load_factory", counting_load)
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine",
                                "--reference-engine", "examples.toy_engine:ToyEngine",
                                "-k", "liveness or token_range")
    result.assert_outcomes(passed=2)
    assert sorted(loaded) == ["examples.toy_engine:ToyEngine"] * 2


def test_a_skips_reason_comes_from_where_it_was_made(pytester: pytest.Pytester) -> None:
    # The summary's reason is the one conformance_context recorded, not text read back from
    # the report's longrepr (here overwritten before the terminal reporter sees it).
    pytester.makeconftest("""
        import pytest

        fates = []

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_logreport(report):
            if report.skipped:
                report.longrepr = ("x.py", 1, "Skipped: garbled")
                fates.extend(v for k, v in report.user_properties
                             if k == "batching-engines fate")

        def pytest_terminal_summary(terminalreporter):
            terminalreporter.write_line(f"fates recorded: {fates}")
    """)
    pytester.makepyfile(test_suite=PULLS_SUITE)
    result = pytester.runpytest(*PROFILE, "--engine", "examples.toy_engine:ToyEngine",
                                "-k", "reference_parity")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "fates recorded: [[]('skip', 'no reference engine given*",
        "*reference_parity not run: no reference engine given (--reference-engine*",
    ])
    result.stdout.no_fnmatch_line("*garbled*")
