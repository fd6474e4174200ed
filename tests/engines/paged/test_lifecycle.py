"""The paged engine's aborts in every state, refused requests and bad options: blocks always
come back, and a refused request changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engines.paged.engine import PagedEngine
from engines.protocol import FinishReason, InvalidRequest, Request, SamplingParams, StepOutput
from tests.helpers import drain, greedy, make_prompts
from tests.kv_checks import drain_checked


def _abort_when(engine: PagedEngine, victim: Request,
                ready: Callable[[PagedEngine], bool]) -> Callable[[int, list[StepOutput]], None]:
    fired: list[int] = []

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        if not fired and ready(engine):
            engine.abort_request(victim.request_id)
            fired.append(step)

    return on_step


def _state(engine: PagedEngine, rid: object) -> str:
    for seq in engine.running:
        if seq.request.request_id == rid:
            return "decoding" if seq.num_pending == 1 else "prefilling"
    for seq in engine.waiting:
        if seq.request.request_id == rid:
            return "preempted" if seq.output else "waiting"
    return "gone"


@pytest.mark.parametrize("state", ["waiting", "prefilling", "decoding", "preempted"])
def test_abort_returns_every_block(state: str) -> None:
    """Abort a request while it waits, while its prompt is half prefilled, while it decodes,
    and after a preemption sent it back to the queue: it finishes with ABORT, the others with
    their tokens, and every block is free once the engine drains."""
    prompts = make_prompts([100, 90, 300, 70], seed=12)
    requests = greedy(prompts, [60, 60, 8, 60])
    victim = {"waiting": requests[3], "prefilling": requests[2], "decoding": requests[0],
              "preempted": requests[3]}[state]
    engine = PagedEngine(num_blocks=24, max_batch_size=3, max_num_batched_tokens=32)
    on_step = _abort_when(engine, victim, lambda e: _state(e, victim.request_id) == state)
    got = drain_checked(engine, requests, on_step=on_step)
    assert got[victim.request_id][1] is FinishReason.ABORT, f"never saw it {state}"
    if state == "preempted":
        assert engine.preemptions > 0
    for r in requests:
        if r is not victim:
            assert got[r.request_id][1] is FinishReason.LENGTH
    assert engine.kv_free_blocks() == engine.kv_total_blocks


def test_request_that_can_never_fit_the_pool_is_refused() -> None:
    engine = PagedEngine(num_blocks=4)  # 64 tokens of KV
    [running] = greedy(make_prompts([10], seed=1), [20])
    engine.add_request(running)
    first = engine.step()
    with pytest.raises(InvalidRequest, match="max_tokens: prompt length 60 \\+ max_tokens 6 "
                       "needs 5 KV blocks of 16 tokens; the pool has 4"):
        engine.add_request(Request((1,) * 60, SamplingParams(max_tokens=6)))
    with pytest.raises(InvalidRequest, match="prompt_token_ids: prompt length 65"):
        engine.add_request(Request((1,) * 65, SamplingParams(max_tokens=1)))
    engine.add_request(Request((1,) * 60, SamplingParams(max_tokens=5)))  # exactly fits
    rest = drain(engine, [])
    alone = drain(PagedEngine(), [Request(running.prompt_token_ids, running.params)])
    tokens = list(first[0].token_ids) + rest[running.request_id][0]
    assert tokens == next(iter(alone.values()))[0]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"block_size": 0}, "block_size"),
    ({"num_blocks": 0}, "num_blocks"),
    ({"max_num_batched_tokens": 4}, "max_num_batched_tokens"),
    ({"max_prefill_only_tokens": 16}, "max_prefill_only_tokens"),
    ({"max_batch_size": 0}, "max_batch_size"),
])
def test_bad_options_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        PagedEngine(**kwargs)  # type: ignore[arg-type]
