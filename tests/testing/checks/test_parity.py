"""parity: the property on hand-built traces (the batched tokens are the tokens served alone,
an aborted request's prefix only forgiven, a wrong accepted draft caught at its position),
its planted bugs caught (toy, reference engine, per-row sampling, constraint, LoRA and
multi-token bugs), and the correct engines passing."""

from __future__ import annotations

from typing import Any

import pytest

from engines.paged.variants import bf16_invariant
from engines.protocol import FinishReason, Request, SamplingParams
from engines.sequential import sequential_bf16
from engines.slot.continuous import continuous_bf16_invariant
from engines.testing.checks import check_named
from engines.testing.context import SuiteOptions, build_context
from engines.testing.features.tenants import OUT_OF_ORDER, READDED
from engines.testing.verdict import verify
from engines.testing.workload import Abort, Workload
from engines.zoo import paged_with_loras
from tests.helpers import GOOD, JUDGE, MULTI_TOKEN, Steps, fails, make_prompts, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, TOY, name_of, planted
from tests.planted.constraint_bugs import CONSTRAINT_PLANTED, CONTROLS
from tests.planted.harness import hunt, pinned
from tests.planted.invariance_bugs import ClaimsBatchInvariance
from tests.planted.lora_bugs import LORA_PLANTED, KeyIgnoresReload, RowsTakeAdmissionOrder
from tests.planted.multitoken import DropsSecondOfRun
from tests.planted.sampling_bugs import SAMPLING_PLANTED
from tests.planted.tenants import (
    caught_on_the_zoos_adapters,
    lora_context,
    settings_for,
    with_zoo_loras,
)
from tests.planted.toy_bugs import PLANTED

CHECK = "parity"
check_parity = check_named(CHECK)
L, A = FinishReason.LENGTH, FinishReason.ABORT


def test_parity() -> None:
    check_parity(trace(GOOD), JUDGE)
    bad: Steps = [list(GOOD[0]), [("r0", (6,), None), ("r1", (4,), L)], list(GOOD[2])]
    fails(check_parity, trace(bad), r"^parity: request 'r1' .* at generated position 1: "
                                    r"alone gave 9, batched gave 4")


def test_parity_forgives_an_aborted_prefix_only() -> None:
    cut: Steps = [[("r0", (5,), None), ("r1", (8,), None)], [("r0", (), A), ("r1", (9,), L)]]
    check_parity(trace(cut, aborts=(Abort(1, "r0"),)), JUDGE)
    fails(check_parity, trace(cut), "alone gave 6, batched gave None")


def test_multi_token_steps_pass() -> None:
    check_parity(trace(MULTI_TOKEN), JUDGE)


def test_a_wrong_accepted_draft_is_caught_at_its_position() -> None:
    wrong: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                    [("r0", (6, 4), L), ("r1", (9,), L)]]
    fails(check_parity, trace(wrong),
          r"request 'r0' .* at generated position 2: alone gave 7, batched gave 4")


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_suite_catches_planted_bug(bug: Any) -> None:
    expect.caught_with_a_script(bug)


@pytest.mark.parametrize("bug", planted(CHECK, TOY), ids=name_of)
def test_search_alone_finds_planted_bug(bug: Any) -> None:
    expect.found_by_the_search_alone(bug)


@pytest.mark.parametrize("bug", planted(CHECK, PLANTED), ids=name_of)
def test_planted_bug_is_not_everywhere(bug: Any) -> None:
    expect.not_everywhere(bug)


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", planted(CHECK, SAMPLING_PLANTED), ids=name_of)
def test_suite_catches_per_row_sampling_bugs(bug: Any) -> None:
    """The seed workloads hold no logits processing: the search must find these
    (derandomized; most are caught in the first 10-30 examples)."""
    expect.caught_by_the_search(bug, 150)


@pytest.mark.parametrize("bug", planted(CHECK, CONSTRAINT_PLANTED), ids=name_of)
def test_suite_catches_planted_constraint_bug(bug: Any) -> None:
    """The constrained seed workloads catch each."""
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("bug", planted(CHECK, LORA_PLANTED), ids=name_of)
def test_the_suite_catches_the_planted_lora_bug(bug: Any) -> None:
    caught_on_the_zoos_adapters(bug)


def test_a_dropped_token_in_a_run_is_caught() -> None:
    found = hunt(DropsSecondOfRun, settings=pinned(30))
    assert found is not None and "parity" in str(found)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_correct_engines_pass_constraints(name: str) -> None:
    """No false alarm: the engines the constraint bugs are planted in pass, seed workloads
    and a few derandomized draws."""
    expect.passes_beside_the_reference(CONTROLS[name], CHECK, pinned(6, shrink=False), name)


def test_the_hard_case_catches_rows_given_adapters_in_admission_order() -> None:
    """Issue 52: caught in one run of two at the default profile before; the tenants
    feature's seed workload (short prompts under other adapters admitted while a long one is
    prefilled in chunks, so their rows go first) catches it every run."""
    bug = RowsTakeAdmissionOrder
    expect.caught_by_the_hard_case(bug, OUT_OF_ORDER, lora_context(with_zoo_loras(bug)))


def test_the_hard_case_catches_a_prefix_key_blind_to_a_readded_adapter() -> None:
    """Issue 52: never caught at the default profile before (only the state machine re-added
    adapters); the tenants feature's seed workload re-adds one under its name with another's
    weights between two requests of one prompt, and catches it every run."""
    bug = KeyIgnoresReload
    expect.caught_by_the_hard_case(bug, READDED, lora_context(with_zoo_loras(bug)))


def test_the_correct_engine_with_loras_passes() -> None:
    expect.passes(paged_with_loras, CHECK, settings_for(CHECK), lora_context(paged_with_loras))


def _many_long_requests() -> Workload:
    """16 greedy requests arriving together, prompts of 5 to 200 tokens and 24 tokens each:
    chunked prompts beside decode rows of every length, where bf16 roundings that move with
    the batch flip near-ties (the plain bf16 paged engine: 3 of 20 such requests diverged
    from their alone runs)."""
    prompts = make_prompts([5 + 13 * i for i in range(16)], seed=7)
    return Workload(tuple(Request(p, SamplingParams(max_tokens=24), request_id=f"r{i}")
                          for i, p in enumerate(prompts)), (0,) * len(prompts),
                    label="batch invariance")


@pytest.mark.parametrize("reference", [None, sequential_bf16], ids=["alone", "bf16_reference"])
def test_a_declared_batch_invariance_that_is_not_fails_exact_parity(reference: Any) -> None:
    """The planted liar: bf16, batch_invariant declared, the plain forward. --parity=auto
    takes its word (exact parity against itself), and parity catches the near-ties it flips;
    beside a bf16 reference too, which is compared tie-aware (issue 50: the choice is per
    comparison, not for the whole run)."""
    ctx = build_context(ClaimsBatchInvariance, name="ClaimsBatchInvariance",
                        options=SuiteOptions(reference=reference))
    assert ctx.parity.mode == "exact" and "batch_invariant" in ctx.parity.reason
    assert ctx.parity.versus_reference == ("exact" if reference is None else "tie-aware")
    outcome = verify(ctx, _many_long_requests(), CHECK)
    assert outcome.failure is not None
    assert str(outcome.failure.error).startswith("parity: "), str(outcome.failure.error)


@pytest.mark.parametrize("factory", [bf16_invariant, continuous_bf16_invariant], ids=name_of)
def test_an_invariant_engine_beside_a_bf16_reference_is_exact_against_itself(
        factory: Any) -> None:
    """Exact parity batched against alone, tie-aware reference_parity, on the workload that
    flips the liar's near-ties."""
    ctx = build_context(factory, name=factory.__name__,
                        options=SuiteOptions(reference=sequential_bf16))
    assert (ctx.parity.mode, ctx.parity.versus_reference) == ("exact", "tie-aware")
    assert ctx.judge.parity == "exact" and ctx.judge.versus_reference().parity == "tie-aware"
    for check in (CHECK, "reference_parity"):
        outcome = verify(ctx, _many_long_requests(), check)
        assert outcome.failure is None, str(outcome.failure)


# Drawn examples (pinned) for the invariant engines' hunt, after the workload above; no seed
# workload: those take ~100 s on a bf16 engine at load 9 (the suite's own runs on the
# invariant engines, docs/engines.md, run them).
INVARIANCE_EXAMPLES = 5


@pytest.mark.parametrize("factory", [bf16_invariant, continuous_bf16_invariant], ids=name_of)
def test_the_batch_invariant_bf16_engines_pass_exact_parity(factory: Any) -> None:
    ctx = build_context(factory, name=factory.__name__,
                        spec=f"{factory.__module__}:{factory.__name__}")
    assert ctx.parity.mode == "exact" and "batch_invariant" in ctx.parity.reason
    outcome = verify(ctx, _many_long_requests(), CHECK)
    assert outcome.failure is None, str(outcome.failure)
    found = hunt(factory, settings=pinned(INVARIANCE_EXAMPLES, shrink=False), seeds=False,
                 ctx=ctx, check=CHECK)
    assert found is None, str(found)[:2000]
