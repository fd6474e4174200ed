"""logprobs: the check reads `logprobs_of`: an engine whose top logprobs are processed (and says
so) is compared with a raw reference only where the request's processing is the identity;
its planted bugs caught, a correct engine and a multi-token one passing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engines.protocol import Guided, SamplingParams
from engines.testing.checks import check_named
from engines.testing.processing import comparable_kinds, not_identity
from engines.testing.search import search
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, name_of, planted
from tests.planted.harness import context_of, hunt, pinned
from tests.planted.sampling_bugs import SAMPLING_PLANTED
from tests.planted.unseeded_bugs import ProcessedLogprobs, ProcessedLogprobsOff

CHECK = "logprobs"
KINDS = "logprobs: not compared with the reference's, of another kind"


def test_identity_processing() -> None:
    assert not_identity(SamplingParams()) is None
    assert not_identity(SamplingParams(temperature=1.0, seed=3)) is None
    assert not_identity(SamplingParams(min_tokens=2)) is None  # no stop id to hold back
    for change, field in (({"temperature": 0.7}, "temperature"),
                          ({"presence_penalty": 0.5}, "presence_penalty"),
                          ({"min_tokens": 2, "stop_token_ids": (3,)}, "min_tokens"),
                          ({"temperature": 1.0, "top_k": 3}, "top_k"),
                          ({"logit_bias": ((1, 2.0),)}, "logit_bias"),
                          ({"guided": Guided("choice", ("a", "b"))}, "guided")):
        assert not_identity(SamplingParams(**change)) == field  # type: ignore[arg-type]
    penalized = SamplingParams(repetition_penalty=1.3)
    assert comparable_kinds("processed", "processed", penalized)
    assert not comparable_kinds("processed", "raw", penalized)
    assert comparable_kinds("raw", "processed", SamplingParams())


def test_processed_logprobs_pass_against_a_raw_reference() -> None:
    """The declared kind is honoured: penalized requests' processed values are not compared
    with the reference's raw ones (the summary counts them), the rest are."""
    ctx = context_of(ProcessedLogprobs)
    assert (ctx.judge.logprobs_of, ctx.judge.reference_logprobs_of) == ("processed", "raw")
    coverage = search(ctx, "logprobs", settings=pinned(60))
    assert coverage.counts[KINDS] > 0, coverage.counts
    assert coverage.counts["with logprobs judged"] > coverage.counts[KINDS]
    notes = check_named("logprobs").tally.notes(coverage.counts, "logprobs")  # type: ignore[union-attr]
    assert any("processed (logprobs_of)" in n for n in notes), notes


def test_without_the_declaration_the_same_engine_fails() -> None:
    """What the check did before it read logprobs_of: processed values against raw ones, a
    false alarm on a correct engine."""
    ctx = context_of(ProcessedLogprobs)
    raw = dataclasses.replace(ctx, judge=dataclasses.replace(ctx.judge, logprobs_of="raw"))
    caught = hunt(ProcessedLogprobs, ctx=raw, check="logprobs", settings=pinned(60))
    assert caught is not None and "reference engine's" in str(caught), caught


def test_processed_logprobs_still_judged_where_processing_is_the_identity() -> None:
    caught = hunt(ProcessedLogprobsOff, settings=pinned(60))
    assert caught is not None and caught.prop == "logprobs", caught
    assert "reference engine's" in str(caught)


@pytest.mark.parametrize("bug", planted(CHECK, SAMPLING_PLANTED), ids=name_of)
def test_suite_catches_per_row_sampling_bugs(bug: Any) -> None:
    expect.caught_by_the_search(bug, 150)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)


def test_tie_aware_values_are_judged_within_the_parity_tolerance() -> None:
    # bf16 moves a batched logprob by a few hundredths: within twice the parity tolerance (a
    # value is a logit less the normaliser, each moved by up to it) it passes, past it it
    # fails, as 1e-4 does at fp32.
    from engines.protocol import FinishReason, Request
    from engines.testing.judging import Judge, Violation
    from engines.testing.oracle import Alone
    from tests.helpers import trace

    r = Request((1, 2), SamplingParams(max_tokens=1, logprobs=2), request_id="r0")
    alone_top = {5: -0.5, 6: -1.0}

    class Oracle:
        def __call__(self, prompt: Any, params: Any, *, lora_path: Any = None) -> Alone:
            return Alone((5,), FinishReason.LENGTH, (alone_top,))

    def judged(top: dict[int, float], tolerance: float) -> object:
        t = trace([[("r0", (5,), FinishReason.LENGTH)]], requests=(r,))
        step, out = t.outputs["r0"][0]
        t.outputs["r0"][0] = (step, dataclasses.replace(out, top_logprobs=(top,)))
        judge = Judge(Oracle(), "tie-aware", tolerance)  # type: ignore[arg-type]
        return check_named(CHECK)(t, judge)

    assert judged({5: -0.53, 6: -0.97}, 0.125) == (0, 1, 0, 0)
    with pytest.raises(Violation, match=r"tolerance 0\.02\)"):
        judged({5: -0.53, 6: -0.97}, 0.01)
