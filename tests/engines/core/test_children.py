"""n > 1 in our engines (engines.core.children): children carry their index, child i is the
request with seed + i, the prompt is prefilled once per family (the children check's bite:
tests/testing/checks/test_children.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.protocol import FinishReason, Request, SamplingParams, StepOutput, child_key
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine

ENGINES = [SequentialEngine, StaticBatchEngine, ContinuousBatchEngine, PagedEngine]


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


def test_paged_children_share_the_prompt_blocks_copy_on_write() -> None:
    # A 6-token prompt in blocks of 4: block 0 full, block 1 partial (2 tokens). The three
    # children hold both after the fork (KV introspection under child_key); each copies the
    # partial one before writing its first token there, and never the full one.
    engine = PagedEngine(block_size=4)
    engine.add_request(Request((1, 2, 3, 4, 5, 6), SamplingParams(max_tokens=5, n=3,
                                                                  temperature=1.0, seed=3),
                               request_id="f"))
    engine.step()  # the prefill, once, and every child's first token
    keys = [child_key("f", i) for i in range(3)]
    tables = engine.kv_block_tables()
    assert sorted(tables, key=str) == keys and engine.forked_prefills == 2
    assert len({tuple(tables[k]) for k in keys}) == 1  # one table, shared
    full, partial = tables[keys[0]]
    assert engine.pool.ref_counts[full] == engine.pool.ref_counts[partial] == 3
    assert all(n == 6 for n in engine.kv_cached_tokens().values())
    engine.step()  # each child writes position 6, into block 1
    tables = engine.kv_block_tables()
    assert {t[0] for t in tables.values()} == {full}  # the full block stays shared
    assert len({t[1] for t in tables.values()}) == 3  # two copies, and the original
    assert engine.cow_copies == 2 and engine.pool.ref_counts[full] == 3
    held = {b for t in tables.values() for b in t}
    assert len(held) + engine.kv_free_blocks() == engine.kv_total_blocks
    while engine.has_work():
        engine.step()
    assert engine.kv_free_blocks() == engine.kv_total_blocks


def test_paged_children_agree_with_the_reference_under_preemption() -> None:
    # A pool too small for every family at once: children are preempted, recomputed (or
    # prefilled on their own when no seat was free at the fork), and still equal the
    # reference's children.
    requests = [Request(tuple(range(5, 5 + k)), SamplingParams(max_tokens=10, n=3,
                                                                temperature=1.0, seed=k),
                        request_id=f"r{k}") for k in (3, 9, 14)]
    want: dict[tuple[Any, int], tuple[int, ...]] = {}
    for r in requests:
        want |= {k: _tokens(v) for k, v in _run(SequentialEngine(), [r]).items()}
    engine = PagedEngine(block_size=4, num_blocks=10, max_batch_size=4,
                         max_num_batched_tokens=8)
    got = {k: _tokens(v) for k, v in _run(engine, requests).items()}
    assert got == want
    assert engine.preemptions > 0 and engine.forked_prefills > 0
