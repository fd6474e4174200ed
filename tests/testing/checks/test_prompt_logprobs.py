"""prompt_logprobs: its planted bug caught (a prompt's logprobs stale on a prefix-cache hit),
a correct engine passing, values at bf16 judged by their magnitude. The paged engine's prompt
logprobs themselves: tests/engines/core/test_prompt_logprobs.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engines.protocol import Capabilities, FinishReason, Request, SamplingParams, StepOutput
from engines.testing.checks import check_named
from engines.testing.judging import Judge, Violation
from engines.testing.oracle import Alone
from engines.testing.precision import choose_parity, relative_for, tolerance_for, value_part
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


def _entries(prompt: Sequence[int], value: float) -> tuple[dict[int, float] | None, ...]:
    """Prompt logprobs with the last position's token at `value` and another candidate 1.0
    above it; the positions before agree everywhere (-1.0)."""
    same = tuple({t: -1.0} for t in prompt[1:-1])
    return (None, *same, {prompt[-1]: value, 0: value + 1.0})


class PromptModel:
    """An oracle serving a request's prompt logprobs (_entries)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        return Alone((0,), FinishReason.LENGTH, None,
                     prompt_logprobs=_entries(prompt, self.value))


def _prompt_trace(value: float, length: int) -> Trace:
    prompt = (*range(3, 3 + length - 1), 7)
    request = Request(prompt, SamplingParams(max_tokens=1, prompt_logprobs=1), request_id="p")
    t = Trace(Workload((request,), (0,)), slots=False, max_batch_size=None)
    out = StepOutput("p", (0,), FinishReason.LENGTH, prompt_logprobs=_entries(prompt, value))
    t.steps.append(StepRecord(0, [out], frozenset(), frozenset(), None, None, 0))
    t.outputs["p"] = [(0, out)]
    t.finished_at["p"] = 0
    return t


def _judged(engine: float, reference: float, length: int = 2, **judge: Any) -> None:
    check_named(CHECK)(_prompt_trace(engine, length),
                       Judge(PromptModel(engine), reference=PromptModel(reference),  # type: ignore[arg-type]
                             **judge))


def test_an_unlikely_prompt_tokens_value_in_bf16_is_judged_by_its_magnitude() -> None:
    """vLLM in bf16 against our bf16 reference: -7.99 against -8.13 and -3.21 against -3.39
    (0.137 and 0.184 apart, past the near-tie tolerance 0.125). A value is a logit less the
    normaliser, each moved by up to the tolerance (a margin cancels the normaliser, a value
    does not), and a far-off logit rounds coarser: one side errs by 2 * 0.125 + 2**-6 *
    |value|, and against the reference both sides do (engines.testing.precision.value_part):
    twice that."""
    bf16: dict[str, Any] = {"parity": "tie-aware", "tolerance": tolerance_for("bfloat16"),
                            "relative": relative_for("bfloat16")}
    _judged(-7.99, -8.13, **bf16)
    _judged(-3.21, -3.39, **bf16)
    # A stale value (another prompt's, PromptLogprobsStaleOnHit's kind) is still caught ...
    with pytest.raises(Violation, match=r"token 0: -5\.9 against -7\.13 \(tolerance 0\.5 "
                                        r"\+ 0\.03125 x \|value\|"):
        _judged(-6.9, -8.13, **bf16)
    # ... and so is 0.6 near the top, where the value is small.
    with pytest.raises(Violation):
        _judged(-0.2, -0.8, **bf16)
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


def test_a_values_tolerance_grows_with_its_position_in_bf16() -> None:
    """vLLM in bf16 against our bf16 reference at position 325 of a 445-token prompt: a top
    candidate at -4.16 against -3.76 (0.399). Attention's sums there hold 326 terms, and their
    rounding grows as the square root of the count: past the 94-token contexts the tolerance
    was measured over it grows by sqrt(325 / 94) = 1.86. A value a whole unit off (another
    prompt's) still fails there; at position 1 a gap of 0.74 fails (both sides' parts,
    0.5 + 2**-5 x 5.5, allow 0.67 there)."""
    bf16: dict[str, Any] = {"parity": "tie-aware", "tolerance": tolerance_for("bfloat16"),
                            "relative": relative_for("bfloat16")}
    _judged(-5.16, -4.76, length=326, **bf16)
    _judged(-5.5, -4.76, length=326, **bf16)
    with pytest.raises(Violation, match=r"position 325 .* \(tolerance 0\.9297"):
        _judged(-5.9, -4.76, length=326, **bf16)
    with pytest.raises(Violation, match=r"position 1 "):
        _judged(-5.5, -4.76, **bf16)


def _summed(engine: Capabilities, reference: Capabilities) -> dict[str, Any]:
    """The judge's fields as build_context sets them from the declarations."""
    choice = choose_parity("auto", None, {"engine": engine, "reference engine": reference})
    return {"parity": choice.mode, "tolerance": choice.tolerance, "relative": choice.relative,
            "reference_parity": choice.reference_mode, "reference_value": choice.reference_value,
            "reference_relative": choice.reference_relative}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_against_the_reference_a_value_may_be_off_by_both_sides_own_errors(dtype: str) -> None:
    """Issue 50: each side deviates from the exact value by its own format's part, so against
    the reference a value may be off by the sum of both: planted at that sum less and more
    than 1e-6. llama-server F16 against sequential_fp16 on a 71-token prompt: -4.0256 against
    -4.0907 (0.065), past one side's 2 x 2**-6 + 2**-9 x 4.09 = 0.039, within the sum 0.078."""
    caps = Capabilities(dtype=dtype)
    judge = _summed(caps, caps)
    reference = -4.0907
    # The nearer candidate (_entries: 1.0 above the token's own value) binds first.
    allowed = judge["reference_value"] + judge["reference_relative"] * abs(reference + 1.0)
    _judged(reference + allowed - 1e-6, reference, **judge)
    with pytest.raises(Violation, match="differ from the reference engine's"):
        _judged(reference + allowed + 1e-6, reference, **judge)
    if dtype == "float16":
        _judged(-4.0256, reference, **judge)
        one_side = value_part(caps)
        assert abs(-4.0256 - reference) > one_side[0] + one_side[1] * abs(reference)


def test_an_invariant_engine_is_judged_exactly_against_itself_beside_a_tie_aware_reference(
        ) -> None:
    """Batched against alone an invariant bf16 engine's values are held to the exact checks'
    1e-4 while its values against a bf16 reference take both sides' parts."""
    judge = _summed(Capabilities(dtype="bfloat16", batch_invariant=True),
                    Capabilities(dtype="bfloat16"))
    assert (judge["parity"], judge["reference_parity"]) == ("exact", "tie-aware")
    _judged(-4.0, -4.3, **judge)  # 0.3 from the reference: within 0.5 + 2**-5 x 4.3
    alone = Judge(PromptModel(-4.0002), reference=PromptModel(-4.0),  # type: ignore[arg-type]
                  **judge)
    with pytest.raises(Violation, match=r"the same request's, served alone.*tolerance 0\.0001"):
        check_named(CHECK)(_prompt_trace(-4.0, 2), alone)
