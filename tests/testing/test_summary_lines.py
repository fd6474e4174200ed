"""The suite's closing summary says what was not judged and why, per reason, with what would
change it; and counts only what the engine has (run as a user would, pytester in-process)."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from engines.testing.checks.seeds import FALSE_ALARM, identical_bound, seeds_needed

ROOT = str(Path(__file__).resolve().parents[2])
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance")
OLD = "*NOT judged (no logprobs, or a chance*"  # the line that named two reasons at once

# Toy engines that differ only in the top_logprobs they return (their tokens are ToyEngine's).
ENGINES = """
import math
from examples.toy_engine import ToyEngine

class NoLogprobs(ToyEngine):
    def top(self, seq, token):
        return None

class CertainLogprobs(ToyEngine):  # one candidate all but certain: no seed count would do
    def top(self, seq, token):
        n = seq.request.params.logprobs
        return ({token: -1e-12, (token + 1) % self.vocab_size: -30.0},) if n else None

class FlatLogprobs(ToyEngine):  # 1% on each candidate: 6 seeds bound the chance far below 1e-6
    def top(self, seq, token):
        n = seq.request.params.logprobs
        return ({(token + j) % self.vocab_size: math.log(0.01) for j in range(n)},) if n else None
"""


@pytest.fixture(autouse=True)
def importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def _summary(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makepyfile(toys=ENGINES)
    result = pytester.runpytest(*SUITE, *args)
    result.assert_outcomes(passed=1)
    return result.stdout.str()


def test_peaked_logprobs_say_how_many_seeds_a_group_needs(pytester: pytest.Pytester) -> None:
    # ToyEngine returns logprobs, and they put exp(-0.5) = 61% on one candidate: its groups of
    # 6-8 seeds are not judged because they are too small, not for want of logprobs.
    out = _summary(pytester, "--engine", "examples.toy_engine:ToyEngine", "-k", "seeds")
    top = {j: -0.5 - j for j in range(5)}
    need = seeds_needed(top)
    assert need == 28 and identical_bound(top, need) < FALSE_ALARM <= identical_bound(top, 27)
    pytester_lines = [line for line in out.splitlines() if line.startswith("  seeds: ")]
    assert len(pytester_lines) == 1, out
    line = pytester_lines[0]
    assert "seed groups not judged: too few seeds for the engine's first-token distribution: "\
           "its top_logprobs put up to 61% on one candidate" in line
    assert f"Groups of {need} or more distinct seeds of one of these prompts would be judged" \
        in line
    assert "no top_logprobs" not in line and "NOT judged" not in out
    assert "seed groups not judged (why: below)" in out


def test_no_logprobs_says_what_the_engine_must_return(pytester: pytest.Pytester) -> None:
    out = _summary(pytester, "--engine", "toys:NoLogprobs", "-k", "seeds")
    assert ("seed groups not judged: the engine returned no top_logprobs for the group's prompt "
            "served alone (greedy, max_tokens=1, logprobs=5)") in out
    assert ("return top_logprobs (one {token id: logprob} mapping per generated token, its top "
            "params.logprobs candidates) when params.logprobs > 0, or pass --reference-engine "
            "with an engine that does.") in out
    assert "too few seeds" not in out and "NOT judged" not in out


def test_a_certain_first_token_is_named(pytester: pytest.Pytester) -> None:
    out = _summary(pytester, "--engine", "toys:CertainLogprobs", "-k", "seeds")
    assert ("seed groups not judged: the engine's top_logprobs make one first token all but "
            "certain, so not even 10,000 distinct seeds would bring the chance") in out
    assert "too few seeds" not in out and "NOT judged" not in out


def test_a_reference_without_logprobs_is_named_as_the_source(pytester: pytest.Pytester) -> None:
    # The bound comes from the reference engine where one is given: the line says so.
    out = _summary(pytester, "--engine", "toys:FlatLogprobs", "--reference-engine",
                   "toys:NoLogprobs", "-k", "seeds and not reference")
    assert "the reference engine returned no top_logprobs" in out
    assert "or pass --reference-engine" not in out


def test_judgeable_groups_are_counted_as_judged(pytester: pytest.Pytester) -> None:
    assert seeds_needed({j: math.log(0.01) for j in range(5)}) == 5  # the groups have 6+
    # Pinned: the search's random groups may, rarely, include one too small to judge (seen
    # once in 9 unpinned runs), which would say "not judged" for a reason this test is not about.
    out = _summary(pytester, "--engine", "toys:FlatLogprobs", "-k", "seeds",
                   "--hypothesis-seed=0")
    assert " seed groups judged" in out
    assert "not judged" not in out


def test_no_kv_block_count_for_an_engine_without_kv_introspection(
        pytester: pytest.Pytester) -> None:
    # ToyEngine has no KVIntrospection: the strategies still draw long outputs (past 2 x 16
    # tokens, a guessed block size), but "across 2+ KV blocks" would claim blocks it lacks.
    out = _summary(pytester, "--engine", "examples.toy_engine:ToyEngine", "-k", "liveness")
    assert "ToyEngine: 1 check(s) passed over " in out
    assert "KV blocks" not in out
    assert " aborts" in out  # ToyEngine is Abortable: that count stays
    # Each check's time, where the run's minutes went.
    assert re.search(r"^  time: \d+ s in the checks: liveness \d+ s$", out, re.M), out


def test_kv_block_count_for_an_engine_with_kv_introspection(pytester: pytest.Pytester) -> None:
    out = _summary(pytester, "--engine", "engines.paged:PagedEngine", "-k", "liveness")
    assert "across 2+ KV blocks" in out



DECLARING = """
from engines.protocol import Capabilities
from tests.planted.toy_bugs import PaddedPositions

class PaddedDeclared(PaddedPositions):  # batch-dependent tokens, admitted to
    def capabilities(self):
        return Capabilities(expected_failed_checks={
            "parity": "rows decode at the longest row's position",
            "seeds": "declared to turn sampled draws off"})
"""


def test_declared_checks_say_what_the_others_left_unjudged(pytester: pytest.Pytester) -> None:
    """bad_input leaves the good requests' parity to parity's own strict xfail, and every
    check but seeds draws greedy requests only: the summary says both."""
    pytester.makepyfile(declaring=DECLARING)
    result = pytester.runpytest(*SUITE, "--engine", "declaring:PaddedDeclared",
                                "-k", "bad_input")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "bad_input: the good requests beside refused ones were not re-checked for parity" \
        in out
    assert "no check but `seeds` drew a sampled request" in out
