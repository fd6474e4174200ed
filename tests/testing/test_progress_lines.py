"""A running check says where it is: a line when it starts, then at least every
--progress-interval seconds what it is doing (seed workloads, examples, shrinking), under -q,
-v and xdist alike, through pytest's terminal (nothing under `-p no:terminal`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.testing import progress_lines as progress
from engines.testing.progress_lines import CheckProgress, running

ROOT = str(Path(__file__).resolve().parents[2])
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance", "--torch-threads=1",
         "--engine", "examples.toy_engine:ToyEngine", "-k", "parity and not reference")
LINE = "batching-engines: ToyEngine-parity: "


@pytest.fixture
def importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setenv("PYTHONPATH", ROOT)  # for the subprocess runs
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_each_interval_and_say_the_phase() -> None:
    clock, said = Clock(), list[str]()
    check = CheckProgress("E-parity", said.append, 30.0, clock=clock)
    with running(check):
        progress.seed_workload(1, 3)
        clock.now = 12.0
        progress.seed_workload(2, 3)
        assert said == []  # not yet 30 s
        clock.now = 31.0
        progress.seed_workload(3, 3)
        clock.now = 40.0
        for _ in range(5):
            progress.example()
        clock.now = 62.0
        progress.example()
        progress.failure()  # said at once
        clock.now = 70.0
        progress.example()
        clock.now = 93.0
        progress.tick()
        clock.now = 130.0
        progress.doing("replaying the failure on freshly built engines")
    progress.example()  # outside a check: nothing, and no error
    assert said == [
        "batching-engines: E-parity: 31 s, seed workload 3 of 3",
        "batching-engines: E-parity: 62 s, 6 example(s) run after the seed workloads",
        "batching-engines: E-parity: 62 s, 6 example(s) run after the seed workloads: found a "
        "failure, shrinking it",
        "batching-engines: E-parity: 93 s, shrinking a failure for 31 s (1 smaller example(s) "
        "tried)",
        "batching-engines: E-parity: 130 s, replaying the failure on freshly built engines",
    ]


@pytest.mark.usefixtures("importable_examples")
def test_quiet_run_shows_start_and_progress(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "-q", "--progress-interval=0.001")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert f"{LINE}started" in out
    assert "s, seed workload 1 of " in out and "example(s) run after the seed workloads" in out


@pytest.mark.usefixtures("importable_examples")
def test_verbose_run_leaves_the_start_to_pytest(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "-v", "--progress-interval=0.001")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert f"{LINE}started" not in out and "seed workload 1 of " in out


@pytest.mark.usefixtures("importable_examples")
def test_interval_zero_and_no_terminal_print_nothing(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "-q", "--progress-interval=0")
    result.assert_outcomes(passed=1)
    assert LINE not in result.stdout.str()
    silent = pytester.runpytest(*SUITE, "-p", "no:terminal", "--progress-interval=0.001")
    assert silent.ret == 0 and LINE not in silent.stdout.str() + silent.stderr.str()


@pytest.mark.usefixtures("importable_examples")
def test_xdist_workers_write_their_lines_to_stderr(pytester: pytest.Pytester) -> None:
    """A worker's stdout is /dev/null: its periodic lines go to its stderr (the controller's),
    prefixed with its id; the start line is the controller's own per-test line's job."""
    result = pytester.runpytest_subprocess(*SUITE, "-n", "1", "--progress-interval=0.001")
    result.assert_outcomes(passed=1)
    err = result.stderr.str()
    assert f"[gw0] {LINE}" in err and "seed workload 1 of " in err, err
    assert f"{LINE}started" not in err + result.stdout.str()
