"""Processed greedy choices at reduced precision (engines.testing.judging.processed): the
suite-side processing of a reference's whole raw distribution, and the teacher-forced
judgement along the engine's tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from engines.protocol import FinishReason, SamplingParams
from engines.testing.coverage import Coverage
from engines.testing.judging import Judge
from engines.testing.judging.processed import (
    Forced,
    add_forced,
    forced_notes,
    judge_forced,
    processed_logits,
)
from engines.testing.oracle import Alone

VOCAB = 4


class Scores:
    """A reference that serves one token at any context: raw logprobs from a table by the
    context's last token (else uniform), its greedy token the raw argmax."""

    def __init__(self, by_last: dict[int, Sequence[float]]) -> None:
        self.by_last = by_last
        self.asked: list[tuple[tuple[int, ...], SamplingParams]] = []

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        self.asked.append((tuple(prompt), params))
        row = self.by_last.get(prompt[-1], [math.log(1 / VOCAB)] * VOCAB)
        raw = {t: float(v) for t, v in enumerate(row)}
        best = max(raw, key=lambda t: raw[t])
        return Alone((best,), FinishReason.LENGTH,
                     (raw,) if params.logprobs >= VOCAB else None)


def test_processing_of_a_raw_distribution_is_exact_for_shift_steps() -> None:
    raw = {0: -1.0, 1: -2.0, 2: -3.0, 3: -4.0}
    p = SamplingParams(logit_bias=((2, 1.5),), frequency_penalty=0.5, presence_penalty=0.25,
                       min_tokens=3, stop_token_ids=(3,), bad_words=((1, 0),),
                       allowed_token_ids=(0, 2, 3))
    z = processed_logits(raw, p, [2, 0])
    assert z is not None
    # 1 is not allowed, 3 is a stop id before min_tokens; 0 was generated once, 2 once.
    assert set(z) == {0, 2}
    assert z[0] == pytest.approx(-1.0 - 0.5 - 0.25) and z[2] == pytest.approx(-2.25)
    assert 0 not in (processed_logits(raw, p, [2, 1]) or {})  # 0 would complete (1, 0)
    assert 3 in (processed_logits(raw, p, [2, 2, 2]) or {})  # min_tokens reached
    assert processed_logits(raw, SamplingParams(repetition_penalty=1.3), []) is None


def _judge(ref: Scores, params: SamplingParams, observed: list[int], start: int = 0
           ) -> tuple[str | None, Forced]:
    forced = Forced()
    how = judge_forced(ref, (9,), params, observed, start,  # type: ignore[arg-type]
                       tolerance=0.1, vocab=VOCAB, counts=forced)
    return how, forced


def test_a_near_tie_of_the_processed_distribution_is_forgiven_and_judging_goes_on() -> None:
    # Raw: 1 is the best by far; the bias makes 2 and 1 a near-tie.
    ref = Scores({9: [-5.0, -1.0, -2.05, -4.0], 2: [-5.0, -3.0, -4.0, -0.5]})
    params = SamplingParams(max_tokens=2, logit_bias=((2, 1.0),))
    how, forced = _judge(ref, params, [2, 3])
    assert how is None
    assert forced.judged["logit_bias"] == 2 and forced.forgiven["logit_bias"] == 1
    # Teacher-forced: position 1 is judged at the engine's context (after 2), not dropped.
    assert ref.asked[1][0] == (9, 2)
    how, _ = _judge(ref, params, [2, 1])
    assert how is not None and "position 1" in how and "2.5 below" in how


def test_a_raw_near_tie_does_not_excuse_a_penalized_choice() -> None:
    # 0 and 1 tie in raw logprobs; the presence penalty puts 0 (generated before) 2 below.
    ref = Scores({9: [-1.0, -3.0, -3.0, -3.0], 0: [-1.0, -1.02, -5.0, -5.0]})
    params = SamplingParams(max_tokens=2, presence_penalty=2.0)
    how, _ = _judge(ref, params, [0, 0])
    assert how is not None and "below the reference's processed choice 1" in how


def test_what_processing_forbids_fails_at_any_gap() -> None:
    ref = Scores({9: [-0.1, -5.0, -5.0, -5.0]})
    params = SamplingParams(max_tokens=3, min_tokens=2, stop_token_ids=(0,))
    how, _ = _judge(ref, params, [0])
    assert how is not None and "forbids" in how and "min_tokens=2" in how


def test_repetition_penalty_is_judged_by_the_references_own_choice_or_counted() -> None:
    ref = Scores({9: [-0.5, -1.0, -3.0, -3.0]})
    params = SamplingParams(max_tokens=1, repetition_penalty=1.3)
    how, forced = _judge(ref, params, [0])
    assert how is None and forced.judged == {"repetition_penalty": 1}
    how, forced = _judge(ref, params, [1])  # the gap needs the logits: not judged
    assert how is None and forced.unjudged["repetition_penalty"] == 1
    assert ref.asked[0][1].repetition_penalty == 1.3  # the reference processes it


def test_the_judge_judges_processed_greedy_requests_from_their_first_divergence() -> None:
    ref = Scores({9: [-5.0, -1.0, -2.05, -4.0], 2: [-5.0, -3.0, -4.0, -0.5]})
    judge = Judge(ref, "tie-aware", 0.1, reference=ref, vocab_size=VOCAB)  # type: ignore[arg-type]
    params = SamplingParams(max_tokens=2, logit_bias=((2, 1.0),))
    forced = Forced()
    assert judge.diverges((9,), [2, 3], [1, 3], observed_top=None, expected_top=None,
                          params=params, forced=forced) is None
    assert forced.judged["logit_bias"] == 2 and forced.forgiven["logit_bias"] == 1
    # Exact parity keeps comparing tokens.
    exact = Judge(ref, "exact", reference=ref, vocab_size=VOCAB)  # type: ignore[arg-type]
    assert exact.diverges((9,), [2, 3], [1, 3], observed_top=None, expected_top=None,
                          params=params) is not None


def test_a_processed_reference_judges_a_repetition_penalized_choice() -> None:
    # The reference hands back the penalized distribution: only the presence penalty (an
    # output-only step) is done here, and the gap is known.
    ref = Scores({9: [-0.5, -0.55, -3.0, -3.0], 0: [-0.5, -0.9, -3.0, -3.0]})
    params = SamplingParams(max_tokens=2, repetition_penalty=1.3, presence_penalty=0.1)
    forced = Forced()
    assert judge_forced(ref, (9,), params, [1, 0], 0, tolerance=0.1,  # type: ignore[arg-type]
                        vocab=VOCAB, counts=forced, kind="processed") is None
    assert forced.forgiven["repetition_penalty"] == 1 and forced.judged["presence_penalty"] == 2
    how = judge_forced(ref, (9,), params, [1, 1], 0, tolerance=0.1,  # type: ignore[arg-type]
                       vocab=VOCAB, counts=Forced(), kind="processed")
    assert how is not None and "position 1" in how  # 1 is 0.4 + 0.1 below 0 there


def test_a_draw_its_filters_forbid_fails_and_a_near_tie_at_the_edge_does_not() -> None:
    from engines.testing.judging.processed import filters_hold

    ref = Scores({9: [-0.1, -3.0, -3.05, -6.0]})

    def drawn(token: int, **filters: float) -> str | None:
        params = SamplingParams(max_tokens=1, temperature=1.0, **filters)  # type: ignore[arg-type]
        return filters_hold(ref, (9,), params, [token], tolerance=0.1,  # type: ignore[arg-type]
                            vocab=VOCAB, counts=Forced())

    assert drawn(2, top_k=2) is None  # 1 and 2 are within the tolerance: either may be 2nd
    assert "top_k=1" in (drawn(2, top_k=1) or "")
    assert "top_p=0.5" in (drawn(1, top_p=0.5) or "")
    assert "min_p=0.5" in (drawn(3, min_p=0.5) or "")
    assert drawn(0, top_k=1, top_p=0.5, min_p=0.5) is None


class TopScores(Scores):
    """Scores with the oracle's top candidates at a context (the raw tie rule's margins)."""

    def top_at(self, context: Sequence[int]) -> dict[int, float] | None:
        tops = self(context, SamplingParams(max_tokens=1, logprobs=VOCAB)).top_logprobs
        return dict(tops[0]) if tops else None


def test_a_raw_near_tie_forgiven_is_counted_and_said() -> None:
    ref = TopScores({9: [-5.0, -1.0, -1.05, -4.0]})
    judge = Judge(ref, "tie-aware", 0.1, reference=ref, vocab_size=VOCAB)  # type: ignore[arg-type]
    forced = Forced()
    assert judge.diverges((9,), [2, 0], [1, 3], observed_top=None, expected_top=None,
                          params=SamplingParams(max_tokens=2), forced=forced) is None
    assert forced.ties == 1 and not forced.judged  # an unprocessed request: the raw rule
    coverage = Coverage()
    add_forced(coverage, forced, "parity")
    notes = forced_notes(coverage.as_dict(), "parity")
    assert len(notes) == 1 and notes[0].startswith("parity: 1 greedy divergence(s) forgiven")
    far = TopScores({9: [-5.0, -1.0, -1.5, -4.0]})  # 0.5 apart: reported, not counted
    judge = Judge(far, "tie-aware", 0.1, reference=far, vocab_size=VOCAB)  # type: ignore[arg-type]
    assert judge.diverges((9,), [2, 0], [1, 3], observed_top=None, expected_top=None,
                          params=SamplingParams(max_tokens=2), forced=forced) is not None
    assert forced.ties == 1


def test_a_position_the_constraints_leave_no_token_is_not_judged() -> None:
    # The only allowed id is a stop id min_tokens holds back: a correct engine emits anything.
    ref = Scores({9: [-0.1, -5.0, -5.0, -5.0]})
    params = SamplingParams(max_tokens=2, min_tokens=2, stop_token_ids=(0,),
                            allowed_token_ids=(0,))
    how, forced = _judge(ref, params, [3])
    assert how is None and forced.unjudged["allowed_token_ids"] == 1


def test_top_k_membership_accepts_a_quantized_engines_processed_choice() -> None:
    # Against a reference without the engine's quantization: 2 is 1.55 below the biased best
    # (past the tolerance) but second of the processed distribution: accepted with top_k 2,
    # counted; 0 is third and fails top_k 1; what the processing forbids (3) fails at any rank.
    ref = Scores({9: [-2.1, -1.0, -2.05, -1.9]})
    params = SamplingParams(max_tokens=1, logit_bias=((1, 0.5),), allowed_token_ids=(0, 1, 2))
    forced = Forced()
    assert judge_forced(ref, (9,), params, [2], 0, tolerance=0.1,  # type: ignore[arg-type]
                        vocab=VOCAB, counts=forced, top_k=2) is None
    assert forced.in_top == 1 and forced.judged["logit_bias"] == 1
    how = judge_forced(ref, (9,), params, [0], 0, tolerance=0.1,  # type: ignore[arg-type]
                       vocab=VOCAB, counts=Forced(), top_k=1)
    assert how is not None and "outside its 1 most likely" in how
    how = judge_forced(ref, (9,), params, [3], 0, tolerance=0.1,  # type: ignore[arg-type]
                       vocab=VOCAB, counts=Forced(), top_k=4)
    assert how is not None and "not among allowed_token_ids" in how
