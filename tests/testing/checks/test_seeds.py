"""seeds: the property on hand-built traces (a seeded request reproduces its tokens alone,
and seeds change them, judged only past the false-alarm bound), its planted bugs caught, a
correct engine and a multi-token one passing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.checks import check_named
from engines.testing.judging import Judge
from engines.testing.oracle import Alone
from engines.testing.recorder import Trace
from tests.helpers import TABLE, Steps, Table, fails, judge, trace
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, REFERENCE_ENGINES, name_of, planted
from tests.planted.harness import pinned

CHECK = "seeds"
check_seeds = check_named(CHECK)


def _seeded(seeds: Sequence[int], outputs: Sequence[tuple[int, ...]]) -> Trace:
    reqs = tuple(Request((4,), SamplingParams(max_tokens=2, temperature=1.0, seed=s),
                         request_id=f"r{i}") for i, s in enumerate(seeds))
    steps: Steps = [[(r.request_id, out, FinishReason.LENGTH)
                     for r, out in zip(reqs, outputs, strict=True)]]
    return trace(steps, requests=reqs)


def test_seeds_reproducible_and_sensitive() -> None:
    j = judge()
    seeds = [11, 22, 33, 44, 55, 66]
    alone = [j.oracle((4,), SamplingParams(max_tokens=2, temperature=1.0, seed=s)).tokens
             for s in seeds]
    [fate] = check_seeds(_seeded(seeds, alone), j)
    assert (fate.size, fate.fate, fate.source) == (6, "judged", "engine")  # 6 x 2%: judged
    fails(check_seeds, _seeded(seeds, [(1, 1)] * 6), "gave \\[1, 1\\] in this workload", j)


def test_seeds_insensitive_is_caught_only_past_the_false_alarm_bound() -> None:
    class ConstantSampler(Table):  # reproducible, and the seed changes nothing
        def serve(self, prompt: tuple[int, ...], params: SamplingParams, *,
                  lora_path: str | None = None) -> Alone:
            self.served += 1
            return Alone((3, 4), FinishReason.LENGTH, None)

    j = Judge(ConstantSampler(TABLE))  # type: ignore[arg-type]
    fails(check_seeds, _seeded([1, 2, 3, 4, 5, 6], [(3, 4)] * 6),
          r"6 requests of one prompt .* all generated \[3, 4\]. A correct engine does that "
          r"with probability below", j)
    # Two seeds: a correct engine agrees with chance 2% here, far above 1e-6: not judged,
    # and the fate says what would be (the summary reports it as it stands).
    [fate] = check_seeds(_seeded([1, 2], [(3, 4)] * 2), j)
    assert (fate.fate, fate.size, fate.top_percent) == ("too few seeds", 2, 2)
    assert fate.needed is not None and 2 < fate.needed <= 6
    # No logprobs to bound the chance with: not judged either.
    check_seeds(_seeded([1, 2, 3, 4, 5, 6], [(3, 4)] * 6),
                Judge(ConstantSampler(TABLE, flat=False)))  # type: ignore[arg-type]


@pytest.mark.parametrize("bug", planted(CHECK, REFERENCE_ENGINES), ids=name_of)
def test_suite_catches_bugs_planted_in_the_reference_engines(bug: Any) -> None:
    expect.caught_by_seed_workloads(bug)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


def test_a_multi_token_engine_passes() -> None:
    expect.a_multi_token_engine_passes(CHECK)
