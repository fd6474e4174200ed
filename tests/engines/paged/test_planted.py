"""Each planted paged-engine bug shows its symptom on a small hand-made workload, and the
real engine does not (the suite's planted-bug report checks that the suite finds them)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.protocol import Request, SamplingParams, StepOutput, capabilities_of
from tests.helpers import alone, drain, greedy, make_prompts
from tests.kv_checks import drain_checked
from tests.planted.paged_bugs import (
    PAGED_PLANTED,
    AbortLeaksBlocks,
    ChunkStartsOneEarly,
    FreesSharedBlocks,
    HoldsSpareBlock,
    PreemptedTableLingers,
    PrefixKeyIgnoresLastToken,
    PrefixKeyIgnoresPast,
    RepeatsTokenOnResume,
    ResumeKeepsOldBlockIds,
)

CHECKS = {"parity", "reference_parity", "kv_accounting", "liveness", "budget_finish",
          "prompt_logprobs"}


@pytest.mark.parametrize("bug", PAGED_PLANTED, ids=lambda b: b.__name__)
def test_planted_bug_is_declared(bug: type) -> None:
    assert issubclass(bug, PagedEngine) and bug.caught_by in CHECKS  # type: ignore[attr-defined]
    assert bug.__doc__ and "\n" not in bug.__doc__.strip()
    # One method holds the bug (an __init__ may only pick the configuration it needs).
    overridden = [k for k, v in vars(bug).items()
                  if inspect.isfunction(v) and not k.startswith("__")]
    assert len(overridden) == 1, f"{bug.__name__} overrides {overridden}: one method each"


@pytest.mark.parametrize("cls", [PrefixKeyIgnoresPast, PagedEngine], ids=lambda c: c.__name__)
def test_prefix_key_ignoring_the_past(cls: type[PagedEngine]) -> None:
    """B's first block equals A's second block: only the buggy key takes A's KV for it."""
    x, y = make_prompts([16, 16], seed=30)
    a = Request(x + y + (1,), SamplingParams(max_tokens=4))
    b = Request(y + (2, 3), SamplingParams(max_tokens=8))
    engine = cls()
    got = drain(engine, [a])
    got.update(drain(engine, [b]))
    hit = got[b.request_id][0] != alone([b])[b.request_id]
    assert hit == (cls is PrefixKeyIgnoresPast) and (engine.prefix_cache_hits > 0) == hit


@pytest.mark.parametrize("cls", [FreesSharedBlocks, PagedEngine], ids=lambda c: c.__name__)
def test_block_freed_while_shared(cls: type[PagedEngine]) -> None:
    """A finishes while B still holds their two shared prefix blocks."""
    [shared] = make_prompts([32], seed=31)
    a = Request(shared + (1,), SamplingParams(max_tokens=3))
    b = Request(shared + (2,), SamplingParams(max_tokens=20))
    engine = cls()
    if cls is PagedEngine:
        drain_checked(engine, [a], late={0: [b]})
        return
    with pytest.raises(AssertionError, match="held \\+ .* free != "):
        drain_checked(engine, [a], late={0: [b]})


@pytest.mark.parametrize("cls", [RepeatsTokenOnResume, PagedEngine], ids=lambda c: c.__name__)
def test_preempted_request_repeats_a_token(cls: type[PagedEngine]) -> None:
    requests = greedy(make_prompts([100, 90, 80, 70], seed=9), [60] * 4)
    engine = cls(num_blocks=24, max_model_len=512)
    got = drain(engine, requests)
    assert engine.preemptions > 0
    too_long = [rid for rid, (tokens, _) in got.items() if len(tokens) > 60]
    assert bool(too_long) == (cls is RepeatsTokenOnResume)
    for rid in too_long:
        tokens = got[rid][0]
        assert any(tokens[i] == tokens[i + 1] for i in range(len(tokens) - 1))
        assert tokens[:60] != alone(requests)[rid]


@pytest.mark.parametrize("cls", [ChunkStartsOneEarly, PagedEngine], ids=lambda c: c.__name__)
def test_chunk_boundary_off_by_one(cls: type[PagedEngine]) -> None:
    """A 100-token prompt alone at a budget of 80 in every step: two chunks (80 + 20)."""
    chunked: dict[str, Any] = {"max_num_batched_tokens": 80, "max_prefill_only_tokens": 80}
    requests = greedy(make_prompts([100], seed=32), [12])
    got = drain(cls(**chunked), requests)
    wrong = got[requests[0].request_id][0] != alone(requests)[requests[0].request_id]
    assert wrong == (cls is ChunkStartsOneEarly)
    short = greedy(make_prompts([40], seed=32), [12])  # one chunk: the bug cannot show
    got = drain(cls(**chunked), short)
    assert got[short[0].request_id][0] == alone(short)[short[0].request_id]


@pytest.mark.parametrize("cls", [AbortLeaksBlocks, PagedEngine], ids=lambda c: c.__name__)
def test_aborted_request_blocks_never_return(cls: type[PagedEngine]) -> None:
    requests = greedy(make_prompts([40, 20], seed=33), [30, 30])
    engine = cls()

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        if step == 2:
            engine.abort_request(requests[0].request_id)

    drain(engine, requests, on_step=on_step)
    leaked = engine.kv_total_blocks - engine.kv_free_blocks()
    assert not engine.kv_block_tables()
    assert (leaked > 0) == (cls is AbortLeaksBlocks)


@pytest.mark.parametrize("cls", [PrefixKeyIgnoresLastToken, PagedEngine],
                         ids=lambda c: c.__name__)
def test_prefix_key_ignoring_a_blocks_last_token(cls: type[PagedEngine]) -> None:
    """B equals A but for the last token of A's first block: only the buggy key hits."""
    [x] = make_prompts([33], seed=34)
    a = Request(x, SamplingParams(max_tokens=4))
    b = Request((*x[:15], (x[15] + 1) % 1024, *x[16:]), SamplingParams(max_tokens=8))
    engine = cls()
    drain(engine, [a])
    got = drain(engine, [b])
    hit = got[b.request_id][0] != alone([b])[b.request_id]
    assert hit == (cls is PrefixKeyIgnoresLastToken)
    assert (engine.prefix_cache_hits > 0) == (cls is PrefixKeyIgnoresLastToken)


@pytest.mark.parametrize("cls", [HoldsSpareBlock, PagedEngine], ids=lambda c: c.__name__)
def test_a_spare_block_is_held(cls: type[PagedEngine]) -> None:
    requests = greedy(make_prompts([20, 5], seed=35), [6, 6])
    engine = cls()
    spare: list[int] = []

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        cached = engine.kv_cached_tokens()
        spare.extend(len(t) - -(-cached[r] // engine.kv_block_size)
                     for r, t in engine.kv_block_tables().items())

    got = drain(engine, requests, on_step=on_step)
    assert set(spare) == ({1} if cls is HoldsSpareBlock else {0})
    assert {r: t for r, (t, _) in got.items()} == alone(requests)


@pytest.mark.parametrize("cls", [PreemptedTableLingers, PagedEngine], ids=lambda c: c.__name__)
def test_a_preempted_requests_table_lingers(cls: type[PagedEngine]) -> None:
    """Sixteen 24-token prompts fill a 32-block pool; their outputs overflow it."""
    requests = greedy(make_prompts([24] * 16, seed=36), [16] * 16)
    engine = cls(max_batch_size=16, num_blocks=32)
    over: list[int] = []

    def on_step(step: int, outputs: list[StepOutput]) -> None:
        held = {b for t in engine.kv_block_tables().values() for b in t}
        over.append(len(held) + engine.kv_free_blocks() - engine.kv_total_blocks)

    got = drain(engine, requests, on_step=on_step)
    assert engine.preemptions > 0
    assert (max(over) > 0) == (cls is PreemptedTableLingers)
    assert {r: t for r, (t, _) in got.items()} == alone(requests)
    # The bug's own configuration holds a whole context for each of its 8 seats, so it never
    # preempts: only a variant's smaller pool reaches it (the default's 16 seats would too).
    own = PreemptedTableLingers()
    assert capabilities_of(own).max_concurrency == 8 and own.kv_total_blocks == 8 * 512 // 16


@pytest.mark.parametrize("cls", [ResumeKeepsOldBlockIds, PagedEngine], ids=lambda c: c.__name__)
def test_a_resumed_request_keeps_its_old_block_ids(cls: type[PagedEngine]) -> None:
    """Default seats and pool (16 seats, 8 whole contexts) over a 128-token context: sixteen
    48-token prompts fill the 64-block pool, their 32-token outputs overflow it. The same
    workload on 8 seats of 8 whole contexts (the default before) never preempts."""
    requests = greedy(make_prompts([48] * 16, seed=37), [32] * 16)
    expected = alone(requests)
    engine = cls(max_model_len=128)
    assert capabilities_of(engine).max_concurrency == 16
    assert engine.kv_total_blocks == 8 * 128 // 16
    got = {r: t for r, (t, _) in drain_checked(engine, requests).items()}
    assert engine.preemptions > 0
    assert (got != expected) == (cls is ResumeKeepsOldBlockIds)
    before = cls(max_model_len=128, max_batch_size=8, kv_slots=8)
    again = [Request(r.prompt_token_ids, r.params, request_id=r.request_id) for r in requests]
    assert {r: t for r, (t, _) in drain(before, again).items()} == expected
    assert before.preemptions == 0
