"""Beam search on the paged engine (engines.paged.beams): the same beams as the sequential
engine (itself held to transformers' generate, tests/engines/core/test_beam_search.py) and as
generate,
served beside ordinary requests, under preemption, chunked prefill, without prefix caching
and while speculating; the pool's accounting after every step (beam rows share blocks
copy-on-write, each hold counted, everything given back); a group scheduled as a whole."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable
from typing import Any

import pytest

from engines.paged.engine import PagedEngine
from engines.paged.speculate import Speculation
from engines.protocol import FinishReason, InvalidRequest, Request, SamplingParams, capabilities_of
from engines.sequential import SequentialEngine
from tests.helpers import abort_a_beam_search, beam_generate, run_children
from tests.planted.beam_bugs import PagedBeamKeepsOldTable, PagedBeamWritesSharedBlock

Children = dict[tuple[Hashable, int], tuple[list[int], FinishReason | None]]


def _beam_params(rng: random.Random, max_tokens: int = 8) -> SamplingParams:
    width = rng.randint(2, 4)
    stride = rng.choice([None, 8, 16])
    stops = () if stride is None else tuple(range(rng.randrange(stride), 1024, stride))
    return SamplingParams(max_tokens=rng.randint(1, max_tokens), beam_width=width,
                          n=rng.randint(1, width),
                          length_penalty=rng.choice([1.0, 0.0, 2.0, -1.0, 0.5]),
                          stop_token_ids=stops)


def _workload(rng: random.Random, size: int, prompt_max: int) -> list[Request]:
    """Beam searches mixed with ordinary requests (greedy, seeded sampling, n > 1)."""
    out = []
    for i in range(size):
        prompt = tuple(rng.randrange(1024) for _ in range(rng.randint(1, prompt_max)))
        kind = rng.choice(["beam", "beam", "greedy", "sampled", "children"])
        if kind == "beam":
            params = _beam_params(rng)
        elif kind == "greedy":
            params = SamplingParams(max_tokens=rng.randint(1, 10))
        elif kind == "sampled":
            params = SamplingParams(max_tokens=rng.randint(1, 10), temperature=1.0,
                                    seed=rng.randrange(1000))
        else:
            params = SamplingParams(max_tokens=rng.randint(1, 10), temperature=1.0,
                                    seed=rng.randrange(1000), n=2)
        out.append(Request(prompt, params, request_id=f"r{i}"))
    return out


def _check_pool(engine: PagedEngine, when: str) -> None:
    """Through KVIntrospection and the pool's hold counts: held + free == total; each hold
    is one table's (a block two beams share is held twice and counted once); each table
    holds the blocks its cached tokens need; a block in two tables is at the same index in
    both and over the same tokens wherever either has computed them."""
    tables, cached = engine.kv_block_tables(), engine.kv_cached_tokens()
    bs = engine.kv_block_size
    held = Counter(b for table in tables.values() for b in table)
    assert len(held) + engine.kv_free_blocks() == engine.kv_total_blocks, when
    for block in range(engine.kv_total_blocks):
        assert engine.pool.ref_counts[block] == held[block], (when, block)
    tokens = {engine._kv_key(seq): seq.tokens(0, seq.num_tokens) for seq in engine.running}
    owners: dict[int, list[tuple[Hashable, int]]] = {}
    for key, table in tables.items():
        need = -(-cached[key] // bs)
        assert need <= len(table) <= need + capabilities_of(engine).kv_extra_blocks, (when, key)
        for j, block in enumerate(table):
            owners.setdefault(block, []).append((key, j))
    for block, users in owners.items():
        (a, ja), *rest = users
        for b, jb in rest:
            assert ja == jb, (when, block)
            upto = min(max(cached[a], cached[b]), (ja + 1) * bs)
            assert tokens[a][:upto] == tokens[b][:upto], (when, block, a, b)


def _whole(engine: PagedEngine, when: str) -> None:
    """Every beam group is in the batch whole or not at all, its rows the search's beams."""
    for group in engine._groups:
        inside = [row in engine.running for row in group.rows]
        assert all(inside) or not any(inside), when
        assert [tuple(r.output) for r in group.rows] == group.search.beams, when


def _serve(engine: PagedEngine, requests: list[Request], *, late: int = 0,
           kept: list[int] | None = None) -> Children:
    """Every child's tokens and finish, checking the pool and the groups after every step;
    the last `late` requests arrive after the second step. `kept`: gets, after each step,
    how many groups hold some rows' logits while others' are still being computed."""
    out: Children = {}
    early, later = requests[: len(requests) - late], requests[len(requests) - late:]
    for r in early:
        engine.add_request(r)
    step = 0
    while engine.has_work() or later:
        if step == 2:
            for r in later:
                engine.add_request(r)
            later = []
        for o in engine.step():
            tokens, finish = out.get((o.request_id, o.index), ([], None))
            assert finish is None, f"child {o.index} of {o.request_id} finished twice"
            out[(o.request_id, o.index)] = (tokens + list(o.token_ids), o.finish_reason)
        _check_pool(engine, f"after step {step}")
        _whole(engine, f"after step {step}")
        if kept is not None:
            kept.append(sum(bool(g.logprobs) for g in engine._groups))
        step += 1
        assert step < 3000, "never drained"
    assert not engine.kv_block_tables() and not engine._groups
    assert engine.kv_free_blocks() == engine.kv_total_blocks
    assert sorted(engine.free_seats) == list(range(engine.max_batch_size))
    return out


def _alone(reference: SequentialEngine, requests: list[Request]) -> Children:
    out: Children = {}
    for r in requests:
        out.update(run_children(reference, [r]))
    return out


CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    # 2-token blocks, a pool that fits the largest beam group alone: groups preempt.
    "small_pool": {"block_size": 2, "num_blocks": 56},
    "small_pool_uncached": {"block_size": 2, "num_blocks": 56, "enable_prefix_caching": False},
    # 8 tokens a step: prompts are chunked, recomputed beams reach their end apart.
    "chunked": {"block_size": 4, "max_batch_size": 8, "max_num_batched_tokens": 8,
                "max_prefill_only_tokens": 8},
    # Both: preempted groups are recomputed in chunks, their rows ending in different steps.
    "small_pool_chunked": {"block_size": 2, "num_blocks": 56, "max_batch_size": 8,
                           "max_num_batched_tokens": 8, "max_prefill_only_tokens": 8},
    "speculating": {"speculation": Speculation("ngram", num_tokens=3)},
    "speculating_draft": {"speculation": Speculation("draft", num_tokens=3)},
}


@pytest.fixture(scope="module")
def reference() -> SequentialEngine:
    return SequentialEngine()


@pytest.mark.parametrize("config", CONFIGS)
def test_paged_beams_equal_the_sequential_engine(config: str,
                                                 reference: SequentialEngine) -> None:
    rng = random.Random(f"paged-beams-{config}")
    engine = PagedEngine(**CONFIGS[config])
    uneven = beams = 0
    for _ in range(4):
        requests = _workload(rng, 10 if config.startswith("small_pool") else 6, 20)
        got = _serve(engine, requests, late=2)
        assert got == _alone(reference, requests), config
        for r in requests:
            if r.params.beam_width > 1:
                beams += 1
                lengths = {len(got[(r.request_id, i)][0]) for i in range(r.params.n)}
                uneven += len(lengths) > 1
    done = engine.exercised()
    assert beams >= 4 and uneven >= 1 and done["beam_reparented_rows"] > 0
    if config in ("small_pool", "small_pool_uncached"):  # (chunked: the test below)
        assert done["beam_group_preemptions"] > 0  # whole (_whole after each step)
    if config.endswith("chunked"):
        assert done["chunked_prompts"] > 0


def test_a_preempted_group_is_recomputed_in_chunks(reference: SequentialEngine) -> None:
    """A pool of 18 blocks of 2 and 8 tokens a step: the group of 2 beams is preempted whole
    when the other request grows, then recomputed in chunks; its rows reach their ends in
    different steps, and the search advances once both have their logits."""
    engine = PagedEngine(block_size=2, num_blocks=18, max_batch_size=4,
                         max_num_batched_tokens=8, max_prefill_only_tokens=8)
    requests = [Request(tuple(range(12)), SamplingParams(max_tokens=20), request_id="B"),
                Request(tuple(range(100, 110)), SamplingParams(max_tokens=8, beam_width=2,
                                                               n=2), request_id="A")]
    kept: list[int] = []
    assert _serve(engine, requests, kept=kept) == _alone(reference, requests)
    assert engine.exercised()["beam_group_preemptions"] >= 1 and any(kept)


def test_paged_beams_equal_transformers_generate() -> None:
    engine = PagedEngine(block_size=4)
    rng = random.Random(3512)
    for _ in range(8):
        prompt = tuple(rng.randrange(1024) for _ in range(rng.randint(1, 10)))
        params = _beam_params(rng)
        got = _serve(engine, [Request(prompt, params, request_id="b")])
        beams = [tuple(got[("b", i)][0]) for i in range(params.n)]
        assert beams == beam_generate(engine.model, prompt, params), (prompt, params)


def test_beams_share_the_prompt_and_copy_the_partial_block() -> None:
    """4 beams over a 6-token prompt in 4-token blocks: after the first step the prompt's
    full block and its partial one are in all four tables, held four times each; the
    partial one is copied before a beam writes into it."""
    engine = PagedEngine(block_size=4)
    engine.add_request(Request(tuple(range(10, 16)), SamplingParams(max_tokens=6,
                                                                    beam_width=4, n=2)))
    engine.step()
    tables = list(engine.kv_block_tables().values())
    assert len(tables) == 4 and len({t[:2] for t in tables}) == 1
    assert all(engine.pool.ref_counts[b] == 4 for b in tables[0][:2])
    engine.step()
    tables = list(engine.kv_block_tables().values())
    assert len({t[0] for t in tables}) == 1  # the full block stays shared
    assert engine.cow_copies >= 3  # all but one beam copied the partial block
    _check_pool(engine, "after the second step")
    while engine.has_work():
        engine.step()
    assert engine.kv_free_blocks() == engine.kv_total_blocks


def test_aborting_a_paged_beam_search_frees_its_rows() -> None:
    engine = PagedEngine(block_size=4)

    def held() -> None:
        assert len(engine.kv_block_tables()) == 4  # 3 beam rows and the other request

    abort_a_beam_search(engine, (1, 2, 3), 4, held)
    assert engine.kv_free_blocks() == engine.kv_total_blocks and not engine._groups
    assert sorted(engine.free_seats) == list(range(engine.max_batch_size))


def test_a_group_holds_its_seats() -> None:
    """A group admitted with fewer rows than its width (its prompt) keeps seats for them:
    with 4 seats and a width of 3, one other request is admitted beside it, not three."""
    engine = PagedEngine(max_batch_size=4, max_num_batched_tokens=8)
    engine.add_request(Request((5, 6, 7), SamplingParams(max_tokens=4, beam_width=3),
                               request_id="b"))
    for i in range(3):
        engine.add_request(Request((9, i), SamplingParams(max_tokens=3), request_id=i))
    engine.step()  # the prompt, then the search's first step: 3 rows
    assert len(engine.running) == 4  # the group's 3 rows, and request 0 only
    assert [seq.request.request_id for seq in engine.waiting] == [1, 2]
    while engine.has_work():
        engine.step()
    assert sorted(engine.free_seats) == list(range(4))


def test_paged_beam_requests_that_could_never_run_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="^beam_width: 4 beams"):
        PagedEngine(max_batch_size=2, max_num_batched_tokens=8).add_request(
            Request((1,), SamplingParams(beam_width=4)))
    with pytest.raises(InvalidRequest, match="^max_tokens: 4 beams"):
        PagedEngine(block_size=4, num_blocks=8).add_request(
            Request((1,) * 8, SamplingParams(beam_width=4, max_tokens=8)))
    with pytest.raises(InvalidRequest, match="not supported with beam search"):
        PagedEngine().add_request(Request((1,), SamplingParams(beam_width=2, temperature=1.0)))


def test_these_tests_catch_the_planted_paged_beam_bugs(reference: SequentialEngine) -> None:
    """The checks above have bite: a re-parented row that keeps its old table returns other
    beams than the sequential engine; rows that skip copy-on-write hold a block over
    different tokens (the pool check) and return other beams."""
    rng = random.Random(3535)
    requests = [Request(tuple(rng.randrange(1024) for _ in range(6)),
                        SamplingParams(max_tokens=6, beam_width=4, n=4), request_id=i)
                for i in range(3)]
    want = _alone(reference, requests)
    assert run_children(PagedBeamKeepsOldTable(block_size=4), requests) != want
    assert run_children(PagedBeamWritesSharedBlock(block_size=4), requests) != want
    with pytest.raises(AssertionError, match="after step"):
        _serve(PagedBeamWritesSharedBlock(block_size=4), requests)
