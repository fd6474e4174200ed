"""beam_search: its planted bugs caught (beam scores not length-normalised, a paged beam
keeping its old block table or writing a shared block), each in a fresh interpreter; at
reduced precision, searches that part at a near-tie forgiven and a worse beam caught. Beam
search itself against transformers' generate: tests/engines/core/test_beam_search.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams, StepOutput
from engines.testing.checks import check_named
from engines.testing.checks.beam_search import bound
from engines.testing.features.beams import BEAM_STOPS
from engines.testing.judging import Judge, Violation
from engines.testing.oracle import Alone
from engines.testing.recorder import StepRecord, Trace
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted import expect
from tests.planted.beam_bugs import BEAM_PLANTED, PagedBeamStopDoesNotFinish
from tests.planted.catalog import name_of, planted
from tests.planted.common_mode_bugs import (
    COMMON_MODE_PLANTED,
    caught_only_by_the_independent_reference,
)
from tests.planted.composition_bugs import BeamIgnoresMinTokens, PagedBesideSequential
from tests.planted.harness import context_of

CHECK = "beam_search"


@pytest.mark.parametrize("bug", planted(CHECK, BEAM_PLANTED), ids=name_of)
def test_suite_catches_beam_bugs(bug: Any) -> None:
    expect.caught_in_a_fresh_process(bug)


def test_the_hard_case_catches_beams_ignoring_min_tokens() -> None:
    """Issue 51's beams with min_tokens: the beams feature's seed workload holds a search
    whose best first token is a stop id under min_tokens 2; the correct paged engine passes."""
    expect.caught_by_the_hard_case_not_its_control(
        BeamIgnoresMinTokens, PagedBesideSequential, CHECK, BEAM_STOPS)


def test_beams_ignoring_min_tokens_pass_where_no_beam_has_min_tokens() -> None:
    """The same bug on the seed workload without its min_tokens requests: it passes (only
    the two features drawn together show it)."""
    ctx = context_of(BeamIgnoresMinTokens)
    found = [w for w in seed_workloads(drawing_of(ctx, CHECK), alone=ctx.oracle.tokens)
             if BEAM_STOPS in w.label]
    assert found and any(r.params.min_tokens for w in found for r in w.requests)
    for w in found:
        keep = [i for i, r in enumerate(w.requests) if not r.params.min_tokens]
        plain = Workload(tuple(dataclasses.replace(w.requests[i], request_id=f"r{j}")
                               for j, i in enumerate(keep)),
                         tuple(w.arrivals[i] for i in keep), label=w.label)
        outcome = verify(ctx, plain, CHECK)
        assert outcome.ok, str(outcome.failure.error if outcome.failure else w.label)[:2000]


# Reduced precision (tie-aware parity): a fake model over 4 tokens whose distribution after
# the prompt (9,) depends on the first generated token only. The first token is a near-tie
# (0 at -1.0, 1 at -1.05); after 0 the rest is a little likelier than after 1.
VOCAB = 4
_AFTER = {0: {0: -3.0, 1: -3.0, 2: -0.5, 3: -0.6}, 1: {0: -3.0, 1: -3.0, 2: -0.6, 3: -0.7}}
_FIRST = {0: -1.0, 1: -1.05, 2: -3.0, 3: -3.0}


class BeamModel:
    """An oracle serving one token's whole distribution at any context, and a beam request's
    children as given (`beams`: the search this run made)."""

    def __init__(self, beams: Sequence[tuple[int, ...]], first: dict[int, float] = _FIRST,
                 after: dict[int, dict[int, float]] = _AFTER,
                 table: dict[tuple[int, ...], dict[int, float]] | None = None) -> None:
        self.beams, self.first, self.after, self.table = list(beams), first, after, table

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        if params.beam_width > 1:
            return Alone(self.beams[0], FinishReason.LENGTH, None,
                         children=tuple(self.beams))
        if self.table is not None:  # by the whole generated prefix, else uniform
            row = self.table.get(tuple(prompt[1:]), dict.fromkeys(range(VOCAB), -1.386))
        else:
            row = self.first if len(prompt) == 1 else self.after[prompt[1]]
        best = max(row, key=lambda t: row[t])
        return Alone((best,), FinishReason.LENGTH, (dict(row),))


def _beam_trace(request: Request, beams: Sequence[tuple[int, ...]]) -> Trace:
    """One beam request whose children finished with `beams` in one step."""
    t = Trace(Workload((request,), (0,)), slots=False, max_batch_size=None)
    stops = request.params.stop_token_ids
    outs = [StepOutput(request.request_id, b, FinishReason.STOP if b[-1] in stops
                       else FinishReason.LENGTH, index=i) for i, b in enumerate(beams)]
    t.steps.append(StepRecord(0, outs, frozenset(), frozenset(), None, None, 0))
    t.outputs[request.request_id] = [(0, o) for o in outs]
    t.finished_at[request.request_id] = 0
    return t


def _beams(engine: Sequence[tuple[int, ...]], reference: Sequence[tuple[int, ...]], *,
           length_penalty: float, stop: tuple[int, ...] = (), **model: Any) -> None:
    """check_beam_search on an engine that returned `engine` (alone too) against a reference
    whose own search returned `reference`, tie-aware at bf16's tolerance."""
    request = Request((9,), SamplingParams(max_tokens=4, beam_width=2, n=2,
                                           length_penalty=length_penalty,
                                           stop_token_ids=stop), request_id="b")
    judge = Judge(BeamModel(engine, **model), "tie-aware", 0.125,  # type: ignore[arg-type]
                  reference=BeamModel(reference, **model),  # type: ignore[arg-type]
                  vocab_size=VOCAB)
    check_named(CHECK)(_beam_trace(request, engine), judge)


FROM_0 = [(0, 2, 2, 2), (0, 2, 2, 3)]  # scores (length_penalty 0): -2.5, -2.6
FROM_1 = [(1, 2, 2, 2), (1, 2, 2, 3)]  # -2.85, -2.95: 0.35 below, rank by rank


@pytest.mark.parametrize(("engine", "reference"), [(FROM_0, FROM_1), (FROM_1, FROM_0)],
                         ids=["reference-parted", "engine-parted"])
def test_searches_parting_at_a_first_token_near_tie_pass_in_bf16(
        engine: list[tuple[int, ...]], reference: list[tuple[int, ...]]) -> None:
    """The false alarm seen on OpenVINO GenAI in bf16: the two searches part at a first-token
    near-tie (0.05) and end on other beams, whose summed scores are 0.35 apart, beyond the
    per-token tolerance 0.125 but within what four tokens' roundings may move a sum (0.5 a
    beam). The engine's better beams pass; its worse ones are within the bound."""
    _beams(engine, reference, length_penalty=0.0)


def test_searches_parting_at_a_near_tie_later_on_pass_in_bf16() -> None:
    """OpenVINO GenAI at its CPU defaults, seed 2: its beams are the fp32 reference's exactly,
    while sequential_bf16's search took the other side of a near-tie at the second token and
    found a beam that scores far better (-60.4 against -85.9, length_penalty -1). Here the
    reference's search takes 2 after (0,) where the engine's took 1 (0.1 apart) and finds
    (0, 2, 3), which scores -3.9 against the engine's best -12.4, past the bounds (3.1); the
    engine's search kept a prefix within rounding of the one it dropped, so that beam is not
    held against it. Held against it, the same lists fail."""
    table = {(): {0: -0.1, 1: -4.0, 2: -4.0, 3: -4.0},
             (0,): {1: -1.0, 2: -1.1, 0: -3.0, 3: -3.0},
             (0, 1): {0: -1.0, 2: -1.5, 1: -3.0, 3: -3.0},
             (0, 1, 0): {0: -1.0, 2: -1.2, 1: -3.0, 3: -3.0},
             (0, 2): {3: -0.1, 0: -2.0, 1: -3.0, 2: -3.0}}
    engine, reference = [(0, 1, 0, 0), (0, 1, 0, 2)], [(0, 2, 3), (0, 1, 0, 0)]
    _beams(engine, reference, length_penalty=-1.0, stop=(3,), table=table)
    far = table | {(0,): {1: -1.0, 2: -1.6, 0: -3.0, 3: -3.0}}  # 0.6 apart: past 2 x 0.125 x 2
    with pytest.raises(Violation, match="falls below the best"):
        _beams(engine, reference, length_penalty=-1.0, stop=(3,), table=far)


# OpenVINO GenAI with an f16 KV cache against sequential_bf16, batching-ci seeds 1-3
# (beam_width 4, length_penalty 0, every 8th token a stop id): the 4th running place after
# the first token was an exact bf16 tie of 551 and 727 (-5.0639 each; 0.012 apart in fp32).
# The reference kept 551 and finished (551, 814) at -8.747; the engine kept 727, whose
# children lost at the second token, and ended on (637, 616, 1008) at -12.12. Neither 551
# nor 727 starts a beam the engine returned. The shape, with beam_width 2 and stop id 3: at
# the first token 3 finishes (-0.5), and 0 (-1.0) and 1 or 2 (-2.0, -2.02) go on.
PARTED = {(): {3: -0.5, 0: -1.0, 1: -2.0, 2: -2.02},
          (0,): {0: -1.5, 1: -1.6, 2: -3.0, 3: -3.0},
          (1,): {3: -0.1, 0: -3.0, 1: -3.0, 2: -3.0},
          (2,): {0: -1.0, 1: -1.0, 2: -1.0, 3: -2.0}}
# engines.core.beams over PARTED, and over PARTED with 2 at -1.98 (the engine's rounding).
KEPT_1, KEPT_2 = [(3,), (1, 3)], [(3,), (0, 0, 0, 2)]


def test_searches_parting_at_a_near_tie_of_a_dropped_running_beam_pass_in_bf16() -> None:
    """The engine's search kept 2 where the reference's kept 1 (0.02 apart), and 2's
    children lost at the second token, so no beam it returns starts with 2: the beams
    returned do not show the near-tie, the candidates after the prompt do (the last place
    that goes on, -2.02, against 1's -2.0). (1, 3) scores -2.1 against the engine's -5.27,
    past the bounds (0.75), and is not held against the engine."""
    _beams(KEPT_2, KEPT_1, length_penalty=0.0, stop=(3,), table=PARTED)


def test_a_beam_dropped_far_from_the_last_place_fails_in_bf16() -> None:
    """The same lists where 1 (-2.0) beats the other candidate for the last place, 2, by 0.7
    (past 2 x 0.125): a search that drops 1 there has a bug, not a rounding."""
    far = PARTED | {(): {3: -0.5, 0: -1.0, 1: -2.0, 2: -2.7}}
    with pytest.raises(Violation, match="falls below the best"):
        _beams(KEPT_2, KEPT_1, length_penalty=0.0, stop=(3,), table=far)


def test_a_beam_far_below_the_best_fails_in_bf16() -> None:
    # Not length normalised (planted BeamScoresNotLengthNormalised's kind): with
    # length_penalty 2 the long beams are best ((0, 2, 2, 2): -0.7 / 16, (0, 2, 2, 3):
    # -3.0 / 16), the short one that ends at stop id 3 scores -2.6 / 4, 0.46 below the second,
    # where the bounds allow 0.125 * (2 / 4 + 4 / 16) = 0.094. Its cumulative logprob (what
    # the bug ranks by) is above (0, 2, 2, 3)'s, and the search cannot have dropped
    # (0, 2, 2, 3) at a near-tie (its prefix sum is 2.3 below the kept (0, 2, 2, 2)'s).
    first, after = {0: -0.1, 1: -3.0, 2: -4.0, 3: -4.0}, {0: {0: -4.0, 1: -4.0, 2: -0.2,
                                                               3: -2.5}}
    with pytest.raises(Violation, match=r"\[-0\.04375, -0\.65\] .* falls below the best"):
        _beams([(0, 2, 2, 2), (0, 3)], [(0, 2, 2, 2), (0, 2, 2, 3)], length_penalty=2.0,
               stop=(3,), first=first, after=after)
    # Duplicated beams and beams out of order fail too, whatever their scores.
    with pytest.raises(Violation):
        _beams([(0, 2, 2, 2), (0, 2, 2, 2)], FROM_0, length_penalty=0.0)
    worse = (0, 2, 0, 2)  # -5.0: 2.5 below (0, 2, 2, 2), past the bounds' 1.0
    with pytest.raises(Violation):
        _beams([worse, (0, 2, 2, 2)], [(0, 2, 2, 2), worse], length_penalty=0.0)


def test_beam_bounds_grow_with_length_and_the_divisor() -> None:
    beam = (0, 2, 2, 2)
    assert bound(0.125, beam, SamplingParams(length_penalty=0.0)) == 0.5  # a sum of 4
    assert bound(0.125, beam, SamplingParams(length_penalty=1.0)) == 0.125  # a mean
    assert bound(0.125, beam, SamplingParams(length_penalty=-1.0)) == 2.0  # a sum times 4


def test_the_hard_case_catches_a_stop_id_that_does_not_finish_a_beam() -> None:
    """Issue 52: caught in one run of two at the default profile before; the beams feature's
    seed workload (stop ids from the search's own best beam) catches it every run."""
    expect.caught_by_the_hard_case(PagedBeamStopDoesNotFinish, BEAM_STOPS)


@pytest.mark.parametrize("bug", planted(CHECK, COMMON_MODE_PLANTED), ids=name_of)
def test_common_mode_bugs_are_caught_against_the_independent_reference(bug: Any) -> None:
    """A bug in engines/core, made alike by the engine and the sequential reference: the
    independent reference (engines.independent) sees it, the shared one cannot."""
    caught_only_by_the_independent_reference(bug)
