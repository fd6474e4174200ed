"""The paged engine: token parity with the sequential reference (transformers' forward and
DynamicCache) under chunking, prefix sharing and preemption, with the KV accounting checked
after every step."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import pytest

from engines.paged.engine import DEFAULT_TOKEN_BUDGET as BUDGET
from engines.paged.engine import PagedEngine
from engines.protocol import (
    Abortable,
    Engine,
    KVIntrospection,
    Request,
    SamplingParams,
    SlotIntrospection,
    StepOutput,
    capabilities_of,
)
from tests.helpers import alone, drain, greedy, make_prompts
from tests.kv_checks import drain_checked

LENGTHS = [3, 250, 17, 1, 96, 40, 130, 64, 16, 33, 200, 5]
BUDGETS = [30, 4, 61, 9, 1, 20, 8, 12, 5, 17, 3, 25]


def assert_parity(got: Mapping[Hashable, tuple[list[int], object]],
                  requests: Sequence[Request]) -> None:
    __tracebackhide__ = True
    expected = alone(requests)
    for r in requests:
        assert got[r.request_id][0] == expected[r.request_id], (
            f"request {r.request_id!r} (prompt {len(r.prompt_token_ids)}, budget "
            f"{r.params.max_tokens}) diverged from the sequential reference")


CONFIGS = {
    "default": {},
    "budget 8": {"max_num_batched_tokens": 8, "max_batch_size": 8},  # a row each a step
    "budget 24, blocks of 4": {"max_num_batched_tokens": 24, "block_size": 4},
    "pool of 40 blocks": {"num_blocks": 40},
    "no prefix caching": {"enable_prefix_caching": False},
    "3 seats": {"max_batch_size": 3},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_mixed_batch_matches_sequential_reference(config: str) -> None:
    requests = greedy(make_prompts(LENGTHS, seed=4), BUDGETS)
    engine = PagedEngine(**CONFIGS[config])  # type: ignore[arg-type]
    assert_parity(drain_checked(engine, requests), requests)


def test_protocols_and_declared_concurrency() -> None:
    engine = PagedEngine(max_batch_size=5)
    assert isinstance(engine, Engine) and isinstance(engine, Abortable)
    assert isinstance(engine, KVIntrospection)
    # Its requests hold no slots kept compact: claiming SlotIntrospection would be false.
    assert not isinstance(engine, SlotIntrospection)
    assert capabilities_of(engine).max_concurrency == 5
    # The pool: half the seats' whole contexts, rounded up (seats can need twice the pool).
    assert engine.kv_block_size == 16 and engine.kv_total_blocks == 3 * 512 // 16
    default = PagedEngine()
    assert capabilities_of(default).max_concurrency == 16
    assert default.kv_total_blocks == 8 * 512 // 16


def _first_token_steps(engine: PagedEngine, requests: Sequence[Request]) -> dict[Hashable, int]:
    first: dict[Hashable, int] = {}

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        for out in outputs:
            if out.token_ids:
                first.setdefault(out.request_id, step)

    drain(engine, requests, on_step=on_step)
    return first


BOUNDARY_LENGTHS = sorted({k * n + d for k in (1, 2) for n in (16, BUDGET) for d in (-1, 0, 1)}
                          | {3 * BUDGET + d for d in (-1, 0, 1)})


def chunking() -> PagedEngine:
    """The default budget in every step, decoding or not: a prompt alone is chunked too."""
    return PagedEngine(max_prefill_only_tokens=BUDGET)


@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_chunk_boundaries_alone(length: int) -> None:
    """Prompts of k x the default budget and k x block_size, and one token either side:
    alone, the first token comes with the last chunk, in step ceil(length / budget)."""
    [prompt] = make_prompts([length], seed=length)
    requests = greedy([prompt], [5])
    first = _first_token_steps(chunking(), requests)
    assert first[requests[0].request_id] == -(-length // BUDGET) - 1
    requests = greedy([prompt], [5])
    assert_parity(drain_checked(chunking(), requests), requests)


def test_budget_binds_only_while_a_request_decodes() -> None:
    """Alone, a prompt of three budgets is prefilled in one step (no one waits on the step);
    beside a decoding request the same prompt is chunked, a token for it every step."""
    short, long_ = make_prompts([5, 3 * BUDGET], seed=12)
    [alone_request] = greedy([long_], [2])
    assert _first_token_steps(PagedEngine(), [alone_request]) == {alone_request.request_id: 0}
    decoding, chunked = greedy([short, long_], [40, 2])
    engine = PagedEngine()
    engine.add_request(decoding)
    engine.step()  # its first token: from now on it decodes
    engine.add_request(chunked)
    steps = 1
    while not any(o.request_id == chunked.request_id for o in engine.step()):
        steps += 1
    assert steps == -(-3 * BUDGET // (BUDGET - 1))  # the budget less the decode row, a step
    drain(engine, [])


def test_chunk_boundaries_batched() -> None:
    """The same prompts together: decode rows shift every later chunk's boundaries."""
    prompts = make_prompts(BOUNDARY_LENGTHS, seed=11)
    requests = greedy(prompts, [1 + i % 7 for i in range(len(prompts))])
    engine = PagedEngine(max_batch_size=4)
    assert_parity(drain_checked(engine, requests), requests)


def test_decode_rows_first_and_the_budget_holds() -> None:
    """While a long prompt is prefilled in chunks, a decoding request gets a token every step,
    and no step computes more than the budget (seen through kv_cached_tokens)."""
    short, long_ = make_prompts([5, 300], seed=2)
    requests = greedy([short, long_], [20, 3])
    engine = PagedEngine(max_num_batched_tokens=32, enable_prefix_caching=False)
    engine.add_request(requests[0])
    engine.step()
    engine.add_request(requests[1])
    before = dict(engine.kv_cached_tokens())
    chunked, rid = 0, requests[1].request_id
    while before.get(rid, 0) < 299:
        outputs = engine.step()
        after = engine.kv_cached_tokens()
        assert any(o.request_id == requests[0].request_id and o.token_ids for o in outputs)
        assert sum(after[r] - before.get(r, 0) for r in after) <= 32
        before = dict(after)
        chunked += 1
    assert chunked == -(-300 // 31)  # 31 prompt tokens a step beside the decode row
    drain(engine, [])


def test_short_prompt_not_held_behind_a_long_ones_chunks() -> None:
    """While a request decodes (the budget binds) and a long prompt is chunked, a short prompt
    that arrives gets its first token in the next step, ahead of the long prompt's remaining
    chunks; every request still matches the reference, KV accounting checked each step."""
    decoding, long_, short = greedy(make_prompts([5, 4 * BUDGET, 10], seed=13), [40, 3, 3])
    first: dict[Hashable, int] = {}

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        for out in outputs:
            first.setdefault(out.request_id, step)

    got = drain_checked(PagedEngine(), [decoding], late={0: [long_], 1: [short]},
                        on_step=on_step)
    assert first[short.request_id] == 2 < first[long_.request_id]
    assert_parity(got, [decoding, long_, short])


def test_prefix_cache_hits_shared_prompt_blocks() -> None:
    [shared, tail_a, tail_b] = make_prompts([40, 7, 9], seed=5)
    a = Request(shared + tail_a, SamplingParams(max_tokens=6))
    b = Request(shared + tail_b, SamplingParams(max_tokens=6))
    engine = PagedEngine()
    got = drain_checked(engine, [a])
    hits = engine.prefix_cache_hits
    got.update(drain_checked(engine, [b]))
    assert engine.prefix_cache_hits - hits == 2, "40 shared tokens: 2 full blocks of 16"
    assert_parity(got, [a, b])
    off = PagedEngine(enable_prefix_caching=False)
    again = [Request(r.prompt_token_ids, r.params) for r in (a, b)]
    drain(off, again)
    assert off.prefix_cache_hits == 0


def test_prefix_shared_while_both_run() -> None:
    """The second request joins while the first still decodes: the blocks sit in both
    tables (checked: same index, full, equal tokens)."""
    [shared] = make_prompts([50], seed=6)
    requests = [Request(shared + (1,), SamplingParams(max_tokens=30)),
                Request(shared + (2,), SamplingParams(max_tokens=5))]
    engine = PagedEngine()
    seen_shared = []

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        tables = list(engine.kv_block_tables().values())
        seen_shared.append(len(tables) == 2 and tables[0][:3] == tables[1][:3])

    got = drain_checked(engine, requests[:1], late={0: requests[1:]}, on_step=on_step)
    assert any(seen_shared) and engine.prefix_cache_hits == 3
    assert_parity(got, requests)


def test_fully_cached_prompt_still_computes_its_last_block() -> None:
    """A prompt of exactly 2 blocks seen before: 1 block is reused, the last one computed
    (its last token's logits give the first output token)."""
    [prompt] = make_prompts([32], seed=8)
    engine = PagedEngine()
    got = drain_checked(engine, [Request(prompt, SamplingParams(max_tokens=4))])
    second = Request(prompt, SamplingParams(max_tokens=4))
    got.update(drain_checked(engine, [second]))
    assert engine.prefix_cache_hits == 1
    assert got[second.request_id][0] == next(iter(got.values()))[0]


def test_preemption_by_recompute_keeps_tokens() -> None:
    """A pool of 24 blocks for requests that grow past it together: the most recently
    admitted goes back to the queue and resumes from its prompt and tokens so far."""
    requests = greedy(make_prompts([100, 90, 80, 70], seed=9), [60, 60, 60, 60])
    engine = PagedEngine(num_blocks=24)
    got = drain_checked(engine, requests)
    assert engine.preemptions > 0
    assert_parity(got, requests)


def test_preemption_with_seeded_sampling() -> None:
    prompts = make_prompts([100, 90, 80, 70], seed=10)
    requests = [Request(p, SamplingParams(max_tokens=60, temperature=0.9, seed=i))
                for i, p in enumerate(prompts)]
    engine = PagedEngine(num_blocks=24)
    got = drain_checked(engine, requests)
    assert engine.preemptions > 0
    for r in requests:
        [(tokens, _)] = drain(PagedEngine(), [Request(r.prompt_token_ids, r.params)]).values()
        assert got[r.request_id][0] == tokens
