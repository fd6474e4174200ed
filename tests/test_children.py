"""n > 1 in our engines (engines.core.children): children carry their index, child i is the
request with seed + i, the prompt is prefilled once per family; the children check's bite."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engines.protocol import FinishReason, InvalidRequest, Request, SamplingParams, StepOutput
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from tests.planted.children_bugs import CHILDREN_PLANTED
from tests.planted.harness import hunt, pinned

ENGINES = [SequentialEngine, StaticBatchEngine, ContinuousBatchEngine]


def _run(engine: Any, requests: list[Request]) -> dict[tuple[Any, int], list[StepOutput]]:
    for r in requests:
        engine.add_request(r)
    outs: dict[tuple[Any, int], list[StepOutput]] = {}
    while engine.has_work():
        for o in engine.step():
            outs.setdefault((o.request_id, o.index), []).append(o)
    return outs


def _tokens(outs: list[StepOutput]) -> tuple[int, ...]:
    return tuple(t for o in outs for t in o.token_ids)


@pytest.mark.parametrize("make", ENGINES)
def test_child_i_is_the_request_with_seed_plus_i(make: Any) -> None:
    family = SamplingParams(max_tokens=6, temperature=1.0, seed=5, n=3, prompt_logprobs=2)
    reference = SequentialEngine()
    alone = [_tokens(_run(reference, [Request((1, 2, 3), dataclasses.replace(
        family, n=1, seed=5 + i), request_id="a")])[("a", 0)]) for i in range(3)]
    assert len(set(alone)) == 3  # distinct seeds, distinct samples (this prompt, these seeds)
    engine = make()
    got = _run(engine, [Request((1, 2, 3), family, request_id="x"),
                        Request((4, 5), SamplingParams(max_tokens=3), request_id="y")])
    assert sorted(got) == [("x", 0), ("x", 1), ("x", 2), ("y", 0)]
    for i in range(3):
        outs = got[("x", i)]
        assert _tokens(outs) == alone[i]
        assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
        assert outs[0].prompt_logprobs is not None and len(outs[0].prompt_logprobs) == 3
    assert engine.forked_prefills == 2  # the prompt was prefilled once for three children


@pytest.mark.parametrize("make", ENGINES)
def test_unseeded_children_draw_independently_and_greedy_ones_agree(make: Any) -> None:
    got = _run(make(), [Request((7, 8), SamplingParams(max_tokens=8, temperature=1.0, n=3),
                                request_id="u"),
                        Request((7, 8), SamplingParams(max_tokens=4, n=2), request_id="g")])
    assert len({_tokens(got[("u", i)]) for i in range(3)}) > 1
    assert _tokens(got[("g", 0)]) == _tokens(got[("g", 1)])


def test_aborting_a_family_ends_every_child() -> None:
    engine = ContinuousBatchEngine(max_batch_size=2)
    engine.add_request(Request((1, 2), SamplingParams(max_tokens=8, n=3), request_id="f"))
    engine.step()
    engine.abort_request("f")
    outs = engine.step()
    assert sorted(o.index for o in outs if o.finish_reason == FinishReason.ABORT) == [0, 1, 2]
    assert not engine.has_work()


def test_the_paged_engine_does_not_serve_n_yet() -> None:
    from engines.paged.engine import PagedEngine

    with pytest.raises(InvalidRequest, match="^n: 2 is not supported"):
        PagedEngine().add_request(Request((1, 2), SamplingParams(n=2)))


@pytest.mark.parametrize("bug", CHILDREN_PLANTED, ids=lambda b: b.__name__)
def test_suite_catches_children_bugs(bug: Any) -> None:
    caught = hunt(bug, settings=pinned(60))
    assert caught is not None and caught.prop == bug.caught_by, str(caught)
    assert "as a runnable script" in str(caught)
