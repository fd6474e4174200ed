"""The `constraints` check and the constrained draws (issue 33): the property on hand-built
traces (each promise kept passes, each broken one fails, an unsatisfiable position is not
blamed); the draws give constraints only to engines that declare them; its planted
bug is caught, from the constrained seed workloads; and the correct engines pass."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from engines.protocol import BASE_PARAMS, CONSTRAINT_PARAMS, FinishReason, Guided, Request
from engines.protocol import SamplingParams as P
from engines.testing.checks import check_named
from engines.testing.features.base import Drawing
from engines.testing.features.constraints import HARD_CASES, UNDER_ADAPTERS, constrained
from engines.testing.limits import EngineLimits
from engines.testing.recorder import Trace
from engines.tokenizer import load, tokenizer_for
from engines.zoo import paged_with_loras
from tests.helpers import JUDGE, Out, fails, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, name_of, planted
from tests.planted.composition_bugs import LoraRowsUnconstrained, lora_rows_unconstrained_with_loras
from tests.planted.constraint_bugs import CONSTRAINT_PLANTED, CONTROLS, BadWordPrefixOneEarly
from tests.planted.harness import pinned
from tests.planted.tenants import lora_context

CHECK = "constraints"
check_constraints = check_named(CHECK)
check_budget_finish = check_named("budget_finish")
S, L = FinishReason.STOP, FinishReason.LENGTH
V = 1024  # the tiny preset's vocabulary


def _judged(params: P, tokens: tuple[int, ...], why: FinishReason) -> Trace:
    """One request that generated `tokens` (one per step), finishing with `why`."""
    r = Request((1, 2), params, request_id="r0")
    steps: list[list[Out]] = [[("r0", (t,), why if i == len(tokens) - 1 else None)]
                              for i, t in enumerate(tokens)]
    t = trace(steps, requests=(r,))
    t.vocab_size, t.tokenizer = V, tokenizer_for("tiny")
    return t


def _ids(text: str) -> tuple[int, ...]:
    return tuple(load("tiny").encode(text).ids)


def test_allowed_ids_and_bad_words() -> None:
    allowed = P(max_tokens=3, allowed_token_ids=(5, 9))
    check_constraints(_judged(allowed, (5, 9, 5), L), JUDGE)
    fails(check_constraints, _judged(allowed, (5, 7, 5), L),
          r"^constraints: request 'r0' .* emitted 7, not among its allowed_token_ids")
    words = P(max_tokens=4, bad_words=((3,), (12, 12)))
    check_constraints(_judged(words, (12, 4, 12, 5), L), JUDGE)
    fails(check_constraints, _judged(words, (4, 12, 12, 5), L),
          r"completed its bad word \[12, 12\]: token 2")
    fails(check_constraints, _judged(words, (4, 3), L), r"completed its bad word \[3\]")


def test_a_position_with_no_token_left_is_not_blamed() -> None:
    # min_tokens holds back both allowed ids (both stop ids): anything may come out.
    p = P(max_tokens=3, min_tokens=2, allowed_token_ids=(5, 9), stop_token_ids=(5, 9))
    judged = check_constraints(_judged(p, (0, 0, 5), S), JUDGE)
    assert judged.unjudged and not judged.requests


@pytest.mark.parametrize(("guided", "full", "prefix", "wrong"), [
    (Guided("choice", ("yes", "no")), "yes", "ye", "yo"),
    (Guided("regex", "[a-c]{2,4}"), "abc", "a", "abd"),
    (Guided("json_schema", json.dumps({"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False})),
     '{"ok": true}', '{"ok', '{"no'),
    (Guided("grammar", 'root ::= "a" | "b" root'), "bba", "bb", "bc"),
], ids=lambda x: getattr(x, "kind", None))
def test_guided_outputs(guided: Guided, full: str, prefix: str, wrong: str) -> None:
    p = P(max_tokens=12, guided=guided)
    eos = V - 1
    for tokens in (_ids(full), (*_ids(full), eos)):
        judged = check_constraints(_judged(p, tokens, S), JUDGE)
        assert judged.requests == {f"guided {guided.kind}, full match": 1}
    check_constraints(_judged(p, _ids(prefix), L), JUDGE)
    fails(check_constraints, _judged(p, _ids(prefix), S), "not a whole match")
    fails(check_constraints, _judged(p, (*_ids(prefix), eos), S), "not a whole match")
    fails(check_constraints, _judged(p, _ids(wrong), L), "does not allow after")
    # A guided STOP before the budget is the grammar's: budget_finish accepts it.
    check_budget_finish(_judged(p, _ids(full), S), JUDGE)


def test_constraints_are_drawn_only_where_declared() -> None:
    declared = Drawing.from_limits(
        EngineLimits(vocab_size=V, max_model_len=64,
                     sampling_fields=BASE_PARAMS | CONSTRAINT_PARAMS,
                     tokenizer=tokenizer_for("tiny")), constraints_dense=True)
    kinds: set[str] = set()

    @Settings(max_examples=60, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        for limits in (declared, Drawing.from_limits(EngineLimits(vocab_size=V,
                                                                  max_model_len=64))):
            p = data.draw(constrained(limits, (1, 2), P(max_tokens=4), None))
            got = {f for f in CONSTRAINT_PARAMS if getattr(p, f) not in (None, ())}
            if limits is declared:
                kinds.update(got)
            else:
                assert not got
    draw()
    assert kinds == set(CONSTRAINT_PARAMS)


@pytest.mark.parametrize("bug", planted(CHECK, CONSTRAINT_PLANTED), ids=name_of)
def test_suite_catches_planted_constraint_bug(bug: Any) -> None:
    """The constrained seed workloads catch it (the constraint bugs other checks catch are
    in those checks' tests)."""
    expect.caught_by_seed_workloads(bug)


def test_the_hard_case_catches_a_bad_word_compared_one_early() -> None:
    """Issue 52: a bad word's prefix compared one position early was caught in one run of two
    at the default profile; the hard-case seed workload (words of the request's own greedy
    continuation) catches it every run."""
    expect.caught_by_the_hard_case(BadWordPrefixOneEarly, HARD_CASES)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_correct_engines_pass(name: str) -> None:
    """No false alarm: the engines the bugs are planted in pass, seed workloads and a few
    derandomized draws (the constraints check's dense ones among them)."""
    expect.passes_beside_the_reference(CONTROLS[name], CHECK, pinned(6, shrink=False), name)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_the_hard_case_catches_lora_rows_left_unconstrained() -> None:
    """Issue 51's LoRA with constraints: the constraints check's seed workload puts allowed
    ids on requests under each adapter and the base model; a mask skipped for adapter rows
    (LoraRowsUnconstrained, served by lora_rows_unconstrained_with_loras) leaves them, and
    the correct paged engine with the same adapters passes."""
    assert LoraRowsUnconstrained.caught_by == CHECK
    expect.caught_by_the_hard_case_not_its_control(
        lora_rows_unconstrained_with_loras, paged_with_loras, CHECK, UNDER_ADAPTERS,
        lora_context)
