"""transformers continuous batching's n > 1 behind the adapter: the library forks each
request into n - 1 children after its prefill (its num_return_sequences, set per request);
greedy children agree with generate, seeded child i equals the request alone with n = 1 and
seed + i (engines.core.children's rule), and each child has its own finish and budget."""

from __future__ import annotations

from engines.adapters.hf import make_engine
from engines.protocol import FinishReason, Request, SamplingParams, capabilities_of
from tests.helpers import hf_generate, make_prompts, run_children


def test_greedy_children_agree_with_generate() -> None:
    prompts = make_prompts([4, 7], seed=3)
    requests = [Request(p, SamplingParams(max_tokens=5, n=3), request_id=f"g{i}")
                for i, p in enumerate(prompts)]
    got = run_children(make_engine(), requests)
    assert len(got) == 6
    for r in requests:
        want = hf_generate(r.prompt_token_ids, 5)
        assert [got[(r.request_id, i)] for i in range(3)] == [(want, FinishReason.LENGTH)] * 3


def test_seeded_children_follow_the_seed_rule_and_differ() -> None:
    prompt = make_prompts([6], seed=4)[0]
    p = SamplingParams(max_tokens=6, n=3, temperature=1.0, seed=11, logprobs=1)
    beside = Request(make_prompts([3], seed=5)[0], SamplingParams(max_tokens=4), request_id="x")
    got = run_children(make_engine(), [Request(prompt, p, request_id="s"), beside])
    children = [got[("s", i)][0] for i in range(3)]
    assert len({tuple(c) for c in children}) > 1
    for i in range(3):
        alone = Request(prompt, SamplingParams(max_tokens=6, temperature=1.0, seed=11 + i),
                        request_id=f"a{i}")
        assert run_children(make_engine(), [alone])[(f"a{i}", 0)][0] == children[i]


def test_abort_a_request_with_children() -> None:
    engine = make_engine()
    r = Request(make_prompts([5], seed=6)[0], SamplingParams(max_tokens=30, n=3,
                                                            temperature=1.0), request_id="a")
    engine.add_request(r)
    engine.step()
    engine.step()
    engine.abort_request("a")  # type: ignore[attr-defined]
    outs = []
    for _ in range(100):
        if not engine.has_work():
            break
        outs += engine.step()
    assert any(o.finish_reason == FinishReason.ABORT for o in outs)
    assert not engine.has_work()
    got = run_children(engine, [Request((1, 2, 3), SamplingParams(max_tokens=3), request_id="b")])
    assert got[("b", 0)] == (hf_generate((1, 2, 3), 3), FinishReason.LENGTH)


def test_children_of_a_one_token_prompt() -> None:
    """The library crashes forking a one-token prompt (report 31); the adapter serves its
    children as requests of their own: greedy children agree with generate, seeded ones
    follow the seed rule."""
    got = run_children(make_engine(), [
        Request((0,), SamplingParams(max_tokens=4, n=2), request_id="g"),
        Request((0,), SamplingParams(max_tokens=4, n=2, temperature=1.0, seed=5),
                request_id="s")])
    want = hf_generate((0,), 4)
    assert got[("g", 0)] == got[("g", 1)] == (want, FinishReason.LENGTH)
    for i in range(2):
        alone = run_children(make_engine(), [Request((0,), SamplingParams(
            max_tokens=4, temperature=1.0, seed=5 + i), request_id="a")])
        assert alone[("a", 0)][0] == got[("s", i)][0]


def test_an_aborted_familys_children_stop_and_free_their_blocks() -> None:
    """Every child ends ABORT and is cancelled in the library, not only the request: a child
    left running
    holds blocks that no request lists (kv_accounting found one under batching-ci). Both the
    library's fork (a 5-token prompt, aborted after it) and a one-token prompt's children as
    requests of their own (aborted at once)."""
    for prompt, steps in ((make_prompts([5], seed=7)[0], 2), ((0,), 0)):
        engine = make_engine()
        engine.add_request(Request(prompt, SamplingParams(max_tokens=30, n=3, temperature=1.0,
                                                          seed=1), request_id="a"))
        for _ in range(steps):
            engine.step()
        engine.abort_request("a")  # type: ignore[attr-defined]
        outs = engine.step()
        assert [(o.index, o.finish_reason) for o in outs] == [
            (i, FinishReason.ABORT) for i in range(3)]  # every unfinished child, once
        assert not engine.has_work()
        assert engine.kv_block_tables() == {}  # type: ignore[attr-defined]
        assert engine.kv_free_blocks() == engine.kv_total_blocks  # type: ignore[attr-defined]


def test_a_forking_request_holds_its_last_prompt_tokens_block_ahead() -> None:
    """Why kv_extra_blocks is one more while children are in flight: the library allocates
    a forking request's whole prompt, prefills all but its last token and forks, so for that
    step the request and its child each hold the last token's block, not yet computed (4-token
    blocks, a 5-token prompt: 2 blocks for 4 cached tokens). Without children: no extra."""
    from engines.adapters.hf.variants import hf_stress

    engine = hf_stress()
    base = capabilities_of(engine).kv_extra_blocks
    engine.add_request(Request((0,) * 5, SamplingParams(max_tokens=3, n=2, temperature=1.0,
                                                        seed=0), request_id="f"))
    engine.step()
    tables, cached = engine.kv_block_tables(), engine.kv_cached_tokens()
    assert {k: (len(tables[k]), cached[k]) for k in tables} == {("f", 0): (2, 4),
                                                                ("f", 1): (2, 4)}
    assert capabilities_of(engine).kv_extra_blocks == base + 1
    while engine.has_work():
        engine.step()
    assert capabilities_of(engine).kv_extra_blocks == base
