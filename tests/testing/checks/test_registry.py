"""A check is one registry entry: a check added to the registry, and to nothing else, is in
the catalogue and the test ids, gets its skip / xfail fate from what it needs, draws and runs
in the search, is judged by the state machine when its entry says, and adds its counters to
the coverage summary. The new check here is what a file under engines/testing/checks/
would hold; the registry is extended the way discovering that file does."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from engines.protocol import Request, SamplingParams, StepOutput
from engines.testing import checks, stateful
from engines.testing.checks import (
    SLOTS,
    Check,
    applicability,
    catalogue,
    check_named,
    known_checks,
    summary_notes,
)
from engines.testing.context import build_context
from engines.testing.coverage import Coverage, Tally
from engines.testing.judging import Judge, Violation
from engines.testing.limits import EngineLimits
from engines.testing.recorder import Trace
from engines.testing.search import search
from engines.testing.stateful import engine_machine, run_engine_machine
from examples.toy_engine import ToyEngine
from tests.planted.harness import pinned

ROOT = str(Path(__file__).resolve().parents[3])
NAME = "tokens_or_finish"
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance")


def check_tokens_or_finish(check: Check, trace: Trace, judge: Judge) -> int:
    """Every output carries a token or finishes its request (what the new file would hold:
    its name is nowhere in it). Returns how many outputs it judged, for its tally."""
    judged = 0
    for rid, outs in trace.outputs.items():
        for step, out in outs:
            judged += 1
            if not out.token_ids and not out.finished:
                raise check.fail(f"step {step} returned an output for request {rid!r} with no "
                                 "token that does not finish it. Expected a token or a finish.")
    return judged


def _add(coverage: Coverage, judged: int, check: str) -> None:
    coverage.counts["outputs judged"] += judged
    if judged > 100:
        coverage.most[f"{check}: many outputs"] = 1  # material for its note, not the line


def _notes(data: Mapping[str, int], check: str) -> list[str]:
    return [f"{check}: over 100 outputs in one workload"] if data.get(
        f"max {check}: many outputs") else []


# The file's Tally, and the registry's one line (the only place the name is written).
TALLY = Tally(_add, _notes)
NEW = Check(NAME, check_tokens_or_finish, needs=(SLOTS,), machine=frozenset({"step"}),
            tally=TALLY)


class EmptyEcho(ToyEngine):
    """Sends an empty, unfinished output ahead of every output with a token: the tokens, the
    finishes and the slots stay right, so only the new check can object."""

    def step(self) -> list[StepOutput]:
        return [o for out in super().step()
                for o in ((StepOutput(out.request_id, (), None), out) if out.token_ids
                          else (out,))]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Check:
    """The registry with the new check as its last line, and nothing else changed."""
    monkeypatch.setattr(checks, "REGISTRY", (*checks.REGISTRY, NEW))
    return NEW


def test_the_new_check_is_in_the_catalogue(registered: Check) -> None:
    assert catalogue()[-1] is registered and check_named(NAME) is registered
    assert NAME not in checks.CHECKS  # the name views are the registry at import time


def test_its_fate_comes_from_what_it_needs(registered: Check) -> None:
    no_slots = EngineLimits(vocab_size=8, max_model_len=16)
    slots = EngineLimits(vocab_size=8, max_model_len=16, max_batch_size=2)
    assert applicability(no_slots, {})[NAME] == checks.Applicability(
        "skip", f"{NAME} needs engines.protocol.SlotIntrospection")
    assert applicability(slots, {NAME: "sends empty echoes"})[NAME] == checks.Applicability(
        "xfail", "sends empty echoes")
    assert applicability(slots, {})[NAME].status == "run"


def test_the_search_runs_it_and_tallies_its_counters(registered: Check) -> None:
    coverage = search(build_context(ToyEngine, name="ToyEngine"), NAME, settings=pinned(10))
    assert coverage.counts["outputs judged"] >= coverage.counts["requests"] > 0
    assert "outputs judged" in Coverage.describe(coverage.as_dict())
    many = Coverage()
    TALLY.add(many, 101, NAME)
    assert f"{NAME}: many" not in Coverage.describe(many.as_dict())  # a note's, not the line's
    assert summary_notes(many.as_dict()) == [f"{NAME}: over 100 outputs in one workload"]
    with pytest.raises(Violation, match=f"^{NAME}: step .* with no token") as caught:
        search(build_context(EmptyEcho, name="EmptyEcho"), NAME, settings=pinned(10))
    assert caught.value.prop == NAME


def test_the_state_machine_judges_it_after_every_step(registered: Check,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stateful, "note", lambda text: None)  # one rule, outside Hypothesis
    ctx = build_context(EmptyEcho, name="EmptyEcho")
    machine = engine_machine(ctx)()
    machine.rec.add(Request((1, 2, 3), SamplingParams(max_tokens=2), request_id="r0"))
    with pytest.raises(Violation) as caught:
        machine.step()  # judged right after the step that sent the echo, not at teardown
    assert caught.value.prop == NAME, str(caught.value)
    with pytest.raises(Violation) as caught:
        run_engine_machine(ctx, settings=pinned(30))
    assert caught.value.prop == NAME, str(caught.value)


def test_a_suite_run_has_its_test_id_and_fails_on_the_bug(registered: Check,
                                                           pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    listed = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine", "--co",
                                "-q")
    listed.stdout.fnmatch_lines([f"*test_conformance[[]ToyEngine-{NAME}[]]"])
    ran = pytester.runpytest(*SUITE, "--engine", "tests.testing.checks.test_registry:EmptyEcho",
                             "-k", NAME)
    ran.assert_outcomes(failed=1)
    ran.stdout.fnmatch_lines([f"*{NAME}: step * with no token*"])


def test_a_declaration_naming_it_is_valid_and_a_misspelling_is_not(registered: Check) -> None:
    known_checks({NAME: "sends empty echoes"})
    with pytest.raises(ValueError, match=f"check 'tokens_or_finsh' does not exist \\(did you "
                                         f"mean '{NAME}'\\?\\)"):
        known_checks({"tokens_or_finsh": "sends empty echoes"})
