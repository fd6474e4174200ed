"""A report's script judges what it replays (engines/testing/rerun.py): run as it stands, it
exits 1 while the bug is there, printing the check's sentence and the tokens expected against
those observed, and 0 with "passes: <check>" on a correct engine. A leak's script carries only
the history it needs (delta debugging over the earlier workloads, engines/testing/leaks.py),
and a report keeps only the requests that matter (engines/testing/trim.py)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from engines.protocol import Capabilities, Request, SamplingParams
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.judging import Violation
from engines.testing.leaks import _shortest_history
from engines.testing.report import explain, explain_leak, script_setup
from engines.testing.rerun import main, script_context
from engines.testing.rerun_script import rerun_script
from engines.testing.stateful import run_engine_machine
from engines.testing.verdict import Leak, failure_after
from engines.testing.workload import Workload
from examples.toy_engine import ToyEngine
from tests.planted.crash_bugs import PadsToFirstRow
from tests.planted.harness import context_of, hunt, pinned
from tests.planted.toy_bugs import CompactionLeavesKV, LeaksBlockPerRequest, StopOnlyFirstId

ROOT = Path(__file__).resolve().parents[2]
CONTROL = "from examples.toy_engine import ToyEngine as make_engine"


def _script(report: str) -> str:
    return report.split("as a runnable script:\n\n", 1)[1]


def _run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _on_control(script: str, planted: str) -> str:
    """The same script with the planted engine's factory swapped for the correct toy engine."""
    line = f"from tests.planted.toy_bugs import {planted} as make_engine"
    assert line in script, script
    return script.replace(line, CONTROL)


def test_a_script_exits_1_with_expected_against_observed_and_0_once_fixed() -> None:
    caught = hunt(CompactionLeavesKV)
    assert caught is not None and caught.prop == "parity", str(caught)
    script = _script(str(caught))
    assert len(script.splitlines()) < 40, script
    proc = _run(script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stderr
    assert said.startswith("parity: request "), said
    rid = said.split("request ", 1)[1].split(" ", 1)[0]
    assert f"request {rid}:\n  expected (alone, fresh engine): [" in said, said
    assert "\n  observed (this workload):       [" in said, said
    expected = said.split("expected (alone, fresh engine): ", 1)[1].split("\n", 1)[0]
    observed = said.split("observed (this workload):       ", 1)[1].split("\n", 1)[0]
    assert expected != observed
    fixed = _run(_on_control(script, "CompactionLeavesKV"))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.strip() == "passes: parity"


def test_a_crash_script_says_what_was_expected_and_ends_with_the_exception() -> None:
    caught = hunt(PadsToFirstRow)
    assert caught is not None and caught.prop == "crash", str(caught)
    proc = _run(_script(str(caught)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("expected: the workload served to the end\nobserved: it "
                                  "raises IndexError in step()"), proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("IndexError: "), proc.stderr


def test_a_report_keeps_only_the_requests_that_matter() -> None:
    """Three requests that arrive once the two that show the bug have finished ride along:
    the report drops them, says so, and its script still fails."""
    ctx = context_of(CompactionLeavesKV)
    reqs = (Request((42,), SamplingParams(max_tokens=1), request_id="r0"),
            Request((49,), SamplingParams(max_tokens=2), request_id="r1"),
            *(Request((60 + i,), SamplingParams(max_tokens=1), request_id=f"r{i}")
              for i in (2, 3, 4)))
    w = Workload(reqs, (0, 0, 6, 7, 8))
    failure = failure_after(ctx, [], w, "parity")
    assert failure is not None and "'r1'" in str(failure.error), failure
    text = str(explain(ctx, failure, w))
    assert "2 of 5 requests kept: the other 3 were dropped" in text, text
    script = _script(text)
    assert "request_id='r1'" in script and "request_id='r3'" not in script, script
    assert _run(script).returncode == 1


def test_the_history_is_delta_debugged_halves_then_single_workloads() -> None:
    tried: list[list[int]] = []

    def fails_after(earlier: list[int], w: object) -> bool:
        tried.append(list(earlier))
        return {3, 9} <= set(earlier)

    kept = _shortest_history(list(range(12)), None, fails_after, budget=40)  # type: ignore[arg-type]
    assert kept == [3, 9]
    assert len(tried) <= 2 * 12, tried
    # The budget bounds the tries; what is kept still fails.
    tried.clear()
    few = _shortest_history(list(range(12)), None, fails_after, budget=3)  # type: ignore[arg-type]
    assert len(tried) == 3 and {3, 9} <= set(few)


def test_a_leaks_script_carries_only_the_history_it_needs() -> None:
    """LeaksBlockPerRequest loses a block per finished request (12 in all): after eleven
    earlier one-request workloads, five more requests cannot all run. Eight of the eleven
    suffice; the report says so and its script, which exits 1, serves only those."""
    ctx = context_of(LeaksBlockPerRequest)
    history = tuple(Workload((Request((10 + i,), SamplingParams(max_tokens=1),
                                      request_id="r0"),), (0,)) for i in range(11))
    w = Workload(tuple(Request((0,), SamplingParams(max_tokens=1), request_id=f"r{i}")
                       for i in range(5)), (0,) * 5)
    first = failure_after(ctx, history, w, "liveness")
    assert first is not None and failure_after(ctx, [], w, "liveness") is None
    text = str(explain_leak(ctx, Leak(first, history), w, "liveness"))
    assert "8 of the 11 it had served before: the failure replays without the others" in text
    script = _script(text)
    printed = script.count("# earlier workload ")
    assert printed == 8, script
    assert _run(script).returncode == 1
    fixed = _run(_on_control(script, "LeaksBlockPerRequest"))
    assert fixed.returncode == 0 and fixed.stdout.strip() == "passes: liveness", fixed.stderr


@pytest.mark.parametrize("argv", [[], ["--steps"]])
def test_main_exits_by_its_verdict(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    w = Workload((Request((42,), SamplingParams(max_tokens=2), request_id="r0"),), (0,))
    with pytest.raises(SystemExit) as done:
        main("parity", w, ToyEngine, argv=argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("passes: parity")
    assert ("step 0: r0 [" in out) == bool(argv), out


def test_the_state_machines_finding_is_shrunk_by_the_suite_and_kept_short() -> None:
    """Hypothesis does not shrink the machine (it would replay every rule of every smaller
    program): the report shrinks its workload, and carries the finding and its script, not
    Hypothesis' listing of the rules."""
    with pytest.raises(Violation) as info:
        run_engine_machine(context_of(StopOnlyFirstId), settings=pinned(60))
    text = str(info.value)
    assert "Failing test case" not in text and "requests kept" in text, text
    notes = getattr(info.value, "__notes__", None) or []
    assert all("@reproduce_failure" in note for note in notes), notes
    assert _run(_script(text)).returncode == 1


class ToyFP16(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(dtype="float16")


class ToyBF16(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(dtype="bfloat16")


class ToyInvariant(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(dtype="bfloat16", batch_invariant=True)


def _judged_by(ctx: SuiteContext) -> tuple[object, ...]:
    """What a context judges by: the parity chosen (mode, tolerances, rules, reasons) and the
    judge's settings."""
    values = [(f.name, getattr(ctx.judge, f.name)) for f in dataclasses.fields(ctx.judge)]
    settings = [(k, v) for k, v in values if isinstance(v, (str, int, float, frozenset))]
    return ctx.parity, settings, ctx.options.torch_threads


@pytest.mark.parametrize(("engine", "reference", "parity", "tolerance"), [
    (ToyFP16, ToyBF16, "auto", None),  # auto picks tie-aware from the coarser side
    (ToyFP16, ToyBF16, "tie-aware", None),
    (ToyBF16, ToyBF16, "auto", 0.2),
    (ToyInvariant, ToyBF16, "auto", None),  # exact against itself, tie-aware against it
    (ToyBF16, None, "exact", None),
], ids=["auto-fp16-vs-bf16", "tie-aware-derived", "auto-given-tolerance", "auto-invariant",
        "exact"])
def test_a_script_judges_as_the_suite_did(engine: type[ToyEngine], reference: type[ToyEngine]
                                          | None, parity: str, tolerance: float | None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51: a replay script judges exactly as the suite did. It rebuilds the context
    from the options the suite was given, not from the choice made from them: an auto choice
    passed on as an explicit --parity=tie-aware with its tolerance chooses otherwise (its
    reason; against a reference at another precision, each side's part of a value's
    tolerance)."""
    suite = build_context(engine, options=SuiteOptions(
        parity=parity, tolerance=tolerance, reference=reference,  # type: ignore[arg-type]
        torch_threads=1))
    w = Workload((Request((42,), SamplingParams(max_tokens=2), request_id="r0"),), (0,))
    script = rerun_script("parity", w, script_setup(suite))
    built: list[SuiteContext] = []

    def rebuilt(check: str, workload: Workload, make_engine: object, **kwargs: object) -> None:
        built.append(script_context(make_engine, **kwargs))  # type: ignore[arg-type]

    monkeypatch.setattr("engines.testing.rerun.main", rebuilt)
    exec(compile(script, "<script>", "exec"), {})
    try:
        assert len(built) == 1, script
        assert _judged_by(built[0]) == _judged_by(suite), script
    finally:
        for ctx in (suite, *built):
            ctx.close()
