"""An exception from the engine under test reads as every other failure does: one sentence
(the call, the step, the exception), the requests in flight, the engine's own frames (the
suite's hidden) and a shrunk script that raises it, in a short pytest failure section; in the
batched run, in the alone oracle's run and in the state machine. The suite's own exceptions
are never dressed up as the engine's. The planted bugs that surface as a crash (caught_by
"crash", whatever check runs them: tests/planted/crash_bugs.py) are caught, here as the
others are in their check's tests."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engines.protocol import Request, SamplingParams, StepOutput
from engines.slot.continuous import ContinuousBatchEngine
from engines.testing import oracle as oracle_module
from engines.testing.crash import EngineCrashed, call_engine
from engines.testing.judging import Violation
from engines.testing.recorder import Recorder
from engines.testing.stateful import run_engine_machine
from engines.testing.workload import Workload
from examples.toy_engine import ToyEngine
from tests.planted import expect
from tests.planted.catalog import REFERENCE_ENGINES, TOY, name_of, planted
from tests.planted.composition_bugs import COMPOSITION_PLANTED
from tests.planted.crash_bugs import CRASH_PLANTED, PadsToFirstRow, WaitingRingOverflow
from tests.planted.harness import context_of, hunt, pinned

ROOT = Path(__file__).resolve().parents[2]
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance")
SHORT = 60  # lines a crash's failure section may take


@pytest.fixture(autouse=True)
def importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def _failure_section(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if re.match(r"_+ test_conformance\[", line))
    end = next(i for i in range(start + 1, len(lines))
               if re.match(r"(_+ test_|-+ batching-engines|=+ short test summary)", lines[i]))
    return lines[start:end]


def _printed_script(section: list[str]) -> str:
    """The script as pytest printed it: after the intro, up to the end of the message."""
    at = next(i for i, line in enumerate(section) if line.endswith("as a runnable script:"))
    body = []
    for line in section[at + 2:]:
        if line.startswith(("All traceback entries are hidden", "    You can reproduce")):
            break
        body.append(line.removeprefix("    "))
    return "\n".join(body)


def _run(script: str, *path: Path) -> subprocess.CompletedProcess[str]:
    env_path = ":".join([str(p) for p in path] + [str(ROOT)])
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": env_path, "PATH": ""})


def _check_report(pytester: pytest.Pytester, args: tuple[str, ...], head: str,
                  raised: str) -> list[str]:
    """Run the suite; its one failure section must be short, start with `head`, show the
    engine's frames and none of the suite's, and print a script that raises `raised`."""
    result = pytester.runpytest(*SUITE, *args)
    result.assert_outcomes(failed=1)
    section = _failure_section(result.outlines)
    text = "\n".join(section)
    assert len(section) < SHORT, text
    assert section[2].startswith(f"E   engines.testing.judging.base.Violation: {head}"), text
    assert "In flight: " in text
    frames = text.split("the suite's frames hidden):\n", 1)[1].split("\n    \n", 1)[0]
    assert "engines/testing/" not in frames and "site-packages" not in frames, frames
    assert frames.splitlines()[-1].strip() == raised, frames
    proc = _run(_printed_script(section), pytester.path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == raised, proc.stderr
    return section


def test_a_crash_in_step_in_the_batched_run(pytester: pytest.Pytester) -> None:
    section = _check_report(
        pytester, ("--engine", "tests.planted.crash_bugs:PadsToFirstRow",
                   "-k", "parity and not reference"),
        "crash: the engine raised IndexError in step() at step 1: list assignment index out "
        "of range", "IndexError: list assignment index out of range")
    text = "\n".join(section)
    # Shrunk from the nine-request seed workload that found it: two requests, two steps.
    assert "Counterexample (2 request(s), 0 bad, 0 abort(s), 2 step(s)), which raises " \
           "IndexError in step() at step 1, as a runnable script:" in text, text
    assert "In flight: 'r0' (prompt of 1 token, 1 of max_tokens 2 out), 'r1' " in text, text
    assert 'crash_bugs.py", line' in text and "in decode" in text


def test_a_crash_in_add_request(pytester: pytest.Pytester) -> None:
    section = _check_report(
        pytester, ("--engine", "tests.planted.crash_bugs:WaitingRingOverflow", "-k",
                   "liveness"),
        "crash: the engine raised IndexError in add_request('r4') at step 0: list assignment "
        "index out of range", "IndexError: list assignment index out of range")
    text = "\n".join(section)
    assert "which raises IndexError in add_request('r4') at step 0" in text
    assert text.count(", waiting)") == 4, text  # r0..r3 wait; r4's add_request raised


def test_a_crash_in_the_alone_oracles_run(pytester: pytest.Pytester) -> None:
    # Served alone, the prompt (1, 2, 3) crashes the engine: the seed workloads ask the oracle
    # for it before any batched run, and that used to print 161 lines of the suite's frames.
    pytester.makepyfile(lonely="""
        from examples.toy_engine import ToyEngine

        class CrashesAlone(ToyEngine):
            def step(self):
                if len(self.live) == 1 and self.waiting:
                    if self.waiting[0].request.prompt_token_ids == (1, 2, 3):
                        raise KeyError("no batch to join")
                return super().step()
    """)
    section = _check_report(
        pytester, ("--engine", "lonely:CrashesAlone", "-k", "budget_finish"),
        "crash: the engine raised KeyError in step() at step 0 serving a request alone: "
        "'no batch to join'", "KeyError: 'no batch to join'")
    text = "\n".join(section)
    assert "In flight: only Request((1, 2, 3), SamplingParams(max_tokens=4)" in text, text
    assert "The request alone on a fresh engine, which raises KeyError in step() at step 0, " \
           "as a runnable script:" in text, text


def test_a_crash_in_the_state_machine() -> None:
    """The machine's rules so far are the workload: its script raises the engine's exception,
    and Hypothesis' listing of the rules is left out of the report."""
    with pytest.raises(Violation) as info:
        run_engine_machine(context_of(PadsToFirstRow), settings=pinned(60, shrink=False))
    text = str(info.value)
    assert info.value.prop == "crash"
    assert text.startswith("crash: the engine raised IndexError in step() at step "), text
    assert "In flight: " in text and "Failing test case" not in text
    # Hypothesis' listing of the rules is gone; only its @reproduce_failure blob may stay (it
    # prints one wherever print_blob is on: its default under CI, and batching-ci's).
    notes = getattr(info.value, "__notes__", None) or []
    assert all("@reproduce_failure" in note for note in notes), notes
    proc = _run(text.split("as a runnable script:\n\n", 1)[1])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == "IndexError: list assignment index out of range"


def test_the_crashing_request_is_in_the_machines_workload() -> None:
    """add_request raised: the request it raised on is in the script (it replays the raise)."""
    with pytest.raises(Violation) as info:
        run_engine_machine(context_of(WaitingRingOverflow), settings=pinned(60, shrink=False))
    text = str(info.value)
    rid = re.search(r"in add_request\('(r\d+)'\)", text)
    assert rid is not None, text
    assert f"request_id='{rid[1]}'" in text.split("as a runnable script:", 1)[1]


class _Deep(ToyEngine):
    """Raises from deep in its own helpers, re-raising as another type on the way out."""

    def step(self) -> list[StepOutput]:
        try:
            return self._descend(30)
        except IndexError as exc:
            raise RuntimeError("the kernel failed") from exc

    def _descend(self, n: int) -> list[StepOutput]:
        if n == 0:
            return [super().step()[1]]  # nothing in flight: no output 1
        return self._descend(n - 1)


def test_the_engines_frames_are_trimmed_and_its_cause_kept() -> None:
    engine = _Deep()
    with pytest.raises(EngineCrashed) as info:
        call_engine("step()", 4, engine.step, None, lambda: "'r0' (...)")
    crash = info.value
    text = str(crash)
    assert text.startswith("crash: the engine raised RuntimeError in step() at step 4: the "
                           "kernel failed\nIn flight: 'r0' (...).\n"), text
    assert "engines/testing" not in crash.frames
    assert "frame(s) of the engine's hidden" in crash.frames
    assert crash.frames.count("in _descend") <= 10 + 2  # elided, not 31 of them
    assert "IndexError: list index out of range" in crash.frames  # the cause, kept
    assert "direct cause of the following exception" in crash.frames
    assert crash.frames.rstrip().endswith("RuntimeError: the kernel failed")
    assert len(text.splitlines()) < 40, text
    assert crash.exception is not None and crash.raises == "raises RuntimeError in step() at " \
                                                            "step 4"


def test_the_suites_own_exception_is_not_the_engines() -> None:
    """An exception raised in the suite's own code inside a protocol call propagates as it
    is: it must not read as something the engine raised."""
    suite_bug = functools.partial(Workload, (), (0,))  # engines/testing/workload.py asserts
    with pytest.raises(AssertionError, match="one arrival step per request") as info:
        call_engine("step()", 0, suite_bug, None)
    assert not isinstance(info.value, EngineCrashed)


def test_the_oracles_own_exception_is_not_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alone oracle used to wrap everything around its engine calls, its own code
    included: a bug there read as 'the engine raised'."""
    def broken_alone(*args: object) -> None:
        raise TypeError("a bug in the oracle")

    monkeypatch.setattr(oracle_module, "Alone", broken_alone)
    with pytest.raises(TypeError, match="a bug in the oracle"):
        hunt(ToyEngine, check="parity", settings=pinned(5, shrink=False))


CRASH = "crash"


@pytest.mark.parametrize("bug", planted(CRASH, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CRASH, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CRASH, CRASH_PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


@pytest.mark.parametrize("bug", planted(CRASH, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", CRASH_PLANTED, ids=name_of)
def test_a_crash_is_reported_with_a_script_that_raises_it(bug: Any) -> None:
    """A planted bug that raises reads as a finding: the call, the step and the exception in
    the first line, then the requests in flight and the engine's own frames (none of the
    suite's); and the script, run as it stands, raises the same exception in the same call."""
    caught = hunt(bug)
    assert caught is not None and caught.prop == "crash", str(caught)
    text = str(caught)
    head = text.splitlines()[0]
    assert head.startswith("crash: the engine raised IndexError in "), head
    call = head.split(" in ", 1)[1].split(" at step ")[0]
    assert call.startswith(("step()", "add_request(")), head
    assert "In flight: " in text
    frames = text.split("the suite's frames hidden):\n", 1)[1].split("\n\n", 1)[0]
    assert "crash_bugs.py" in frames and "engines/testing" not in frames, frames
    proc = subprocess.run([sys.executable, "-c", expect.script_of(text)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == frames.splitlines()[-1], proc.stderr
    assert f"in {call.split('(')[0]}\n" in proc.stderr  # the same protocol method raised


@pytest.mark.parametrize("bug", planted(CRASH, COMPOSITION_PLANTED), ids=name_of)
def test_suite_catches_a_crash_aborting_a_family_after_a_child_finished(bug: Any) -> None:
    """Only a family aborted after a child finished raises (the user's crash of issue 51):
    the children feature's seed workload holds two."""
    expect.caught_by_seed_workloads(bug)


def test_in_flight_counts_each_childs_tokens_against_its_own_budget() -> None:
    """A family's children each have the budget: the crash report's in-flight line gives each
    child's tokens against it, never the family's sum (which read as 12 of max_tokens 4)."""
    recorder = Recorder(ContinuousBatchEngine())
    params = SamplingParams(max_tokens=4, n=3, temperature=1.0, seed=5)
    recorder.add(Request((3, 1, 4), params, request_id="r0"))
    recorder.add(Request((2, 7), SamplingParams(max_tokens=4), request_id="r1"))
    for _ in range(3):
        recorder.step()
    line = recorder.in_flight()
    # A token a step each; the family has 9 in all, which the line must not set against 4.
    assert line.startswith("'r0' (prompt of 3 tokens, n 3, each of max_tokens 4: child 0 3, "
                           "child 1 3, child 2 3 out, temperature 1.0 seed 5), 'r1' (prompt "
                           "of 2 tokens, 3 of max_tokens 4 out"), line
