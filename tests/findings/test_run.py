"""A script's verdict: its RESULT line and its exit status, which must agree; everything else
is the script failing, never a verdict on the library."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.findings.run import Outcome, Result, parse_result, run_script


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "r99_fake_case.py"
    path.write_text("import sys\n" + body)
    return path


@pytest.mark.parametrize(("body", "expected"), [
    ('print("expected: a"); print("observed: b"); print("RESULT: reproduces"); sys.exit(1)',
     Result(Outcome.REPRODUCES)),
    ('print("RESULT: fixed")', Result(Outcome.FIXED)),
    ('print("RESULT: cannot-run no file /x/tiny"); sys.exit(2)',
     Result(Outcome.CANNOT_RUN, "no file /x/tiny")),
])
def test_the_three_verdicts(tmp_path: Path, body: str, expected: Result) -> None:
    assert run_script(sys.executable, script(tmp_path, body)) == expected


def test_a_traceback_is_the_script_crashing(tmp_path: Path) -> None:
    result = run_script(sys.executable, script(tmp_path, 'raise KeyError("vocab_size")'))
    assert result.outcome is Outcome.CANNOT_RUN
    assert result.why == "script crashed (exit status 1, no RESULT line): KeyError: 'vocab_size'"


def test_a_result_the_exit_status_contradicts_is_a_crash(tmp_path: Path) -> None:
    result = run_script(sys.executable, script(tmp_path, 'print("RESULT: reproduces")'))
    assert result.outcome is Outcome.CANNOT_RUN
    assert "RESULT: reproduces but exit status 0" in result.why


def test_an_exit_status_outside_the_contract_is_a_crash(tmp_path: Path) -> None:
    body = 'print("RESULT: reproduces"); sys.exit(3)'
    assert run_script(sys.executable, script(tmp_path, body)).outcome is Outcome.CANNOT_RUN


def test_the_last_result_line_counts() -> None:
    out = "RESULT: fixed\nmore output\nRESULT: reproduces\n"
    assert parse_result(out, "", 1) == Result(Outcome.REPRODUCES)
    # An unknown word is not a verdict.
    assert parse_result("RESULT: maybe\n", "", 1).outcome is Outcome.CANNOT_RUN


def test_a_timeout_cannot_run(tmp_path: Path) -> None:
    result = run_script(sys.executable, script(tmp_path, "import time; time.sleep(30)"),
                        timeout=1)
    assert result == Result(Outcome.CANNOT_RUN, "timed out after 1 s")


def test_arguments_reach_the_script_and_it_runs_outside_the_repository(tmp_path: Path) -> None:
    # The cwd is an empty folder: `import engines` works there only through an installed
    # package, never through the working directory (the pinned venvs install it editable,
    # so only the cwd is checked here).
    body = ('import os; ok = sys.argv[1:] == ["--model-dir", "/m"] and not os.listdir(".")\n'
            'print("RESULT: fixed" if ok else "RESULT: reproduces"); sys.exit(0 if ok else 1)')
    assert run_script(sys.executable, script(tmp_path, body), ["--model-dir", "/m"]) \
        == Result(Outcome.FIXED)


def test_a_missing_python_cannot_run(tmp_path: Path) -> None:
    result = run_script(tmp_path / "no-python", script(tmp_path, ""))
    assert result.outcome is Outcome.CANNOT_RUN and "could not start" in result.why


def test_descriptions() -> None:
    assert Result(Outcome.REPRODUCES, version="0.32.0").describe() == "reproduces on 0.32.0"
    assert Result(Outcome.FIXED, version="0.33.0").describe() == "fixed in 0.33.0"
    assert Result(Outcome.CANNOT_RUN, "no venv").describe() == "cannot run: no venv"
