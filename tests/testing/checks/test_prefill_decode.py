"""prefill_decode: the property on a hand-built trace (a token decoded must be what
prefilling the prompt and the tokens before it gives), its planted bug caught, a correct
engine and a multi-token one passing, a processed near-tie forgiven at reduced precision."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.checks import check_named
from engines.testing.judging import Judge
from engines.testing.oracle import Alone
from tests.helpers import GOOD, Steps, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, name_of, planted
from tests.planted.harness import pinned

CHECK = "prefill_decode"
check_prefill_decode = check_named(CHECK)


def test_prefill_decode() -> None:
    check_prefill_decode(trace(GOOD), judge())
    # r0 decoded 5, 6, 9 where prefilling (1, 2, 5, 6) gives 7: a decode-only bug.
    bad: Steps = [list(GOOD[0]), list(GOOD[1]), [("r0", (9,), FinishReason.LENGTH)]]
    fails(check_prefill_decode, trace(bad),
          r"decoded 9 as its token 2 .* prefilling its prompt and its first 2 token\(s\) "
          r"\[5, 6\] gives \[7\]")


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)


class PenalizedModel:
    """Prefill on the engine gives 7 after (1, 2, 5); the reference's processed distribution
    there (a whole one, asked with logprobs = VOCAB) puts 6 `gap` below 7, while its raw top
    five hold neither (a repetition_penalty below 1 lifts the prompt's and output's tokens)."""

    def __init__(self, gap: float) -> None:
        self.gap = gap

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        if params.logprobs >= VOCAB:
            row = dict.fromkeys(range(VOCAB), -6.0) | {7: -1.0, 6: -1.0 - self.gap}
            return Alone((7,), FinishReason.LENGTH, (row,))
        raw = {t: -1.0 - t / 10 for t in range(5)}
        return Alone((7,), FinishReason.LENGTH, (raw,) if params.logprobs else None)


VOCAB = 10


def test_a_processed_near_tie_is_forgiven_in_bf16() -> None:
    """OpenVINO GenAI in bf16 under batching-ci: a repetition_penalty=0.7 choice whose
    processed logprobs tie exactly in bf16 read as "logprob margin inf" (neither token among
    the raw top five). Judged on the reference's processed distribution, as parity judges a
    processed choice: a tie is forgiven, a gap past the tolerance still fails."""
    request = Request((1, 2), SamplingParams(max_tokens=2, repetition_penalty=0.7),
                      request_id="r0")
    decoded = trace([[("r0", (5,), None)], [("r0", (6,), FinishReason.LENGTH)]],
                    requests=(request,))

    def judged(gap: float) -> Judge:
        model = PenalizedModel(gap)
        return Judge(model, "tie-aware", 0.125, reference=model,  # type: ignore[arg-type]
                     vocab_size=VOCAB, reference_logprobs_of="processed")

    forced = check_prefill_decode(decoded, judged(0.0))
    assert forced.judged == {"repetition_penalty": 1}
    fails(check_prefill_decode, decoded, r"decoded 6 as its token 1 .* 0\.5 below the "
          r"reference's processed choice 7", judged(0.5))
