"""prompt_logprobs: its planted bug caught (a prompt's logprobs stale on a prefix-cache hit),
a correct engine passing, values at bf16 judged by their magnitude. The paged engine's prompt
logprobs themselves: tests/engines/core/test_prompt_logprobs.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams, StepOutput
from engines.testing.checks import check_named
from engines.testing.judging import Judge, Violation
from engines.testing.oracle import Alone
from engines.testing.precision import relative_for, tolerance_for
from engines.testing.recorder import StepRecord, Trace
from engines.testing.workload import Workload
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, name_of, planted
from tests.planted.common_mode_bugs import (
    COMMON_MODE_PLANTED,
    caught_only_by_the_independent_reference,
)
from tests.planted.harness import pinned

CHECK = "prompt_logprobs"


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


class PromptModel:
    """An oracle serving a request's prompt logprobs: the prompt token's value `value` at
    position 1, the other candidate 1.0 above it."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        entry = {prompt[1]: self.value, 0: self.value + 1.0}
        return Alone((0,), FinishReason.LENGTH, None, prompt_logprobs=(None, entry))


def _prompt_trace(value: float) -> Trace:
    request = Request((3, 7), SamplingParams(max_tokens=1, prompt_logprobs=1), request_id="p")
    t = Trace(Workload((request,), (0,)), slots=False, max_batch_size=None)
    out = StepOutput("p", (0,), FinishReason.LENGTH,
                     prompt_logprobs=(None, {7: value, 0: value + 1.0}))
    t.steps.append(StepRecord(0, [out], frozenset(), frozenset(), None, None, 0))
    t.outputs["p"] = [(0, out)]
    t.finished_at["p"] = 0
    return t


def _judged(engine: float, reference: float, **judge: Any) -> None:
    check_named(CHECK)(_prompt_trace(engine),
                       Judge(PromptModel(engine), reference=PromptModel(reference),  # type: ignore[arg-type]
                             **judge))


def test_an_unlikely_prompt_tokens_value_in_bf16_is_judged_by_its_magnitude() -> None:
    """vLLM in bf16 against our bf16 reference: -7.99 against -8.13 and -3.21 against -3.39
    (0.137 and 0.184 apart, past the near-tie tolerance 0.125). A value is a logit less the
    normaliser, each moved by up to the tolerance (a margin cancels the normaliser, a value
    does not), and a far-off logit rounds coarser: 2 * 0.125 + 2**-6 * |value|."""
    bf16 = {"parity": "tie-aware", "tolerance": tolerance_for("bfloat16"),
            "relative": relative_for("bfloat16")}
    _judged(-7.99, -8.13, **bf16)
    _judged(-3.21, -3.39, **bf16)
    # A stale value (another prompt's, PromptLogprobsStaleOnHit's kind) is still caught ...
    with pytest.raises(Violation, match=r"token 0: -6\.5 against -7\.13 \(tolerance 0\.25 "
                                        r"\+ 0\.015625 x \|value\|"):
        _judged(-7.5, -8.13, **bf16)
    # ... and so is 0.3 near the top, where the value is small.
    with pytest.raises(Violation):
        _judged(-0.2, -0.5, **bf16)
    with pytest.raises(Violation):  # a value banned on one side only, at any magnitude
        _judged(float("-inf"), -8.13, **bf16)
    # fp32, exact parity: the value tolerance is the check's own 1e-3, no relative part.
    with pytest.raises(Violation, match=r"\(tolerance 0\.001;"):
        _judged(-7.99, -8.13, relative=relative_for("bfloat16"))


@pytest.mark.parametrize("bug", planted(CHECK, COMMON_MODE_PLANTED), ids=name_of)
def test_common_mode_bugs_are_caught_against_the_independent_reference(bug: Any) -> None:
    """A bug in engines/core, made alike by the engine and the sequential reference: the
    independent reference (engines.independent) sees it, the shared one cannot."""
    caught_only_by_the_independent_reference(bug)
