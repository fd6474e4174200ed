"""The paged engine's speculative decoding (engines.paged.speculate): every request gets the
tokens, logprobs and finish the engine gives it without speculation (greedy and seeded,
with penalties, min_tokens and stop ids), the KV accounting holds after every step,
rejected drafts leave no block held, and drafts really are verified and accepted."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest
import torch

from engines.paged.drafters import prompt_lookup
from engines.paged.engine import PagedEngine
from engines.paged.forward import Row
from engines.paged.speculate import Speculation
from engines.protocol import FinishReason, Request, SamplingParams, StepOutput
from tests.helpers import make_prompts
from tests.kv_checks import drain_checked
from tests.spec_drafts import scripted

NGRAM = Speculation("ngram", num_tokens=3)
DRAFT = Speculation("draft", num_tokens=3)


def test_prompt_lookup_takes_the_latest_longest_match() -> None:
    assert prompt_lookup([1, 2, 3, 9, 8, 1, 2, 3], 2, 3, 1) == [9, 8]
    # The 2-gram (7, 3) occurs twice: the latest occurrence's continuation wins.
    assert prompt_lookup([7, 3, 4, 7, 3, 5, 7, 3], 1, 3, 1) == [5]
    assert prompt_lookup([5, 6, 7, 8], 3, 3, 1) == []  # the last token occurs nowhere else
    assert prompt_lookup([4, 4], 3, 3, 1) == [4]  # the continuation may overlap the suffix


def test_prompt_lookup_matches_whole_tokens_only() -> None:
    # As 4-byte ints, 256 then 0 contain the bytes of 1 at offset 1: not a token boundary.
    assert prompt_lookup([256, 0, 5, 1], 1, 1, 1) == []


def _repetitive(seed: int) -> list[tuple[int, ...]]:
    """Prompts of a chunk repeated, so that prompt lookup has matches from the start."""
    chunks = make_prompts([3, 5, 8, 2, 6, 4], seed=seed)
    return [c * r for c, r in zip(chunks, [9, 5, 4, 12, 3, 6], strict=True)]


def _requests(seed: int) -> list[Request]:
    """Greedy, seeded, penalized, min_tokens and logprobs requests over repetitive and
    random prompts."""
    prompts = _repetitive(seed) + make_prompts([20, 7, 40], seed=seed + 1)
    kinds = [SamplingParams(max_tokens=40),
             SamplingParams(max_tokens=30, temperature=0.9, seed=seed, logprobs=2),
             SamplingParams(max_tokens=25, repetition_penalty=1.3, frequency_penalty=0.4),
             SamplingParams(max_tokens=33, temperature=0.7, seed=seed + 5, top_k=20,
                            presence_penalty=0.5),
             SamplingParams(max_tokens=20, min_tokens=12, stop_token_ids=(1, 2, 3)),
             SamplingParams(max_tokens=50, logprobs=3)]
    return [Request(p, kinds[i % len(kinds)], request_id=f"r{i}")
            for i, p in enumerate(prompts)]


Outs = dict[Hashable, list[StepOutput]]


def _serve(engine: PagedEngine, requests: list[Request]) -> Outs:
    outs: Outs = {r.request_id: [] for r in requests}

    def keep(step: int, outputs: list[StepOutput]) -> None:
        for o in outputs:
            outs[o.request_id].append(o)

    drain_checked(engine, requests[:5], late={1: requests[5:]}, on_step=keep)
    return outs


def _flat(outs: Outs) -> dict[Hashable, tuple[tuple[int, ...], FinishReason | None]]:
    """Per request: its tokens over all its outputs, and its finish."""
    return {rid: (tuple(t for o in os for t in o.token_ids), os[-1].finish_reason)
            for rid, os in outs.items()}


def _logprobs(outs: Outs) -> dict[Hashable, list[tuple[float | None, dict[int, float]]]]:
    """Per request, per token: its logprob and its top logprobs (where asked)."""
    return {rid: [(lp, dict(top)) for o in os
                  for lp, top in zip(o.logprobs or (), o.top_logprobs or (), strict=True)]
            for rid, os in outs.items()}


def _close(a: Outs, b: Outs) -> bool:
    """Logprobs equal within float32 rounding: a verified position's logits come from a
    span of several tokens, a plain one's from a single query (other kernel blocking, the
    same tokens)."""
    for rid, entries in _logprobs(a).items():
        other = _logprobs(b)[rid]
        if len(entries) != len(other):
            return False
        for (lp, top), (lp2, top2) in zip(entries, other, strict=True):
            if lp is None or lp2 is None or abs(lp - lp2) > 1e-4 or top.keys() != top2.keys():
                return False
            if any(abs(top[t] - top2[t]) > 1e-4 for t in top):
                return False
    return True


@pytest.mark.parametrize("spec", [NGRAM, DRAFT], ids=["ngram", "draft"])
def test_speculation_gives_the_plain_engines_tokens(spec: Speculation) -> None:
    requests = _requests(3)
    plain = _serve(PagedEngine(), requests)
    engine = PagedEngine(speculation=spec)
    got = _serve(engine, requests)
    assert _flat(got) == _flat(plain) and _close(got, plain)
    counts = engine.exercised()
    assert counts["spec_accepted_tokens"] > 0
    assert counts["spec_draft_tokens"] > counts["spec_accepted_tokens"]  # some rejected too
    assert any(len(o.token_ids) > 1 for os in got.values() for o in os)


def test_plain_engine_has_no_speculation_counters() -> None:
    assert "spec_draft_tokens" not in PagedEngine().exercised()


def test_rows_with_and_without_drafts_share_one_forward() -> None:
    engine = PagedEngine(speculation=NGRAM)
    seen: list[list[Row]] = []
    forward = engine.runner.forward

    def spy(rows: Sequence[Row]) -> torch.Tensor:
        seen.append(list(rows))
        return forward(rows)

    engine.runner.forward = spy  # type: ignore[method-assign]
    _serve(engine, _requests(4))
    assert any(any(len(r.logit_offsets()) > 1 for r in rows)
               and any(len(r.tokens) == 1 for r in rows) for rows in seen)


def _known(drafts: dict[tuple[int, ...], list[int]]) -> PagedEngine:
    return scripted(PagedEngine, drafts)


def test_right_drafts_are_all_accepted_and_wrong_ones_none() -> None:
    requests = [r for r in _requests(8) if r.params.temperature == 0]
    plain = _serve(PagedEngine(), requests)
    right = {r.prompt_token_ids: list(_flat(plain)[r.request_id][0]) for r in requests}
    engine = _known(right)
    got = _serve(engine, requests)
    assert _flat(got) == _flat(plain)
    counts = engine.exercised()
    assert counts["spec_accepted_tokens"] == counts["spec_draft_tokens"] > 0
    assert max(len(o.token_ids) for os in got.values() for o in os) == 4  # 3 drafts + bonus
    wrong = {p: [(t + 1) % 1024 for t in c] for p, c in right.items()}
    engine = _known(wrong)
    assert _flat(_serve(engine, requests)) == _flat(plain)
    counts = engine.exercised()
    assert counts["spec_accepted_tokens"] == 0 < counts["spec_draft_tokens"]


@pytest.mark.parametrize("held", [False, True], ids=["stop", "within_min_tokens"])
def test_a_stop_id_inside_an_accepted_run(held: bool) -> None:
    """Every draft accepted: step 0 prefills (token 0), step 1 emits tokens 1-4, step 2
    tokens 5-8. Token 6, the 2nd of step 2's run, is a stop id: the request ends there,
    mid-run; or, within min_tokens, it does not, and the token is banned there (as without
    speculation)."""
    prompt = make_prompts([12], seed=40)[0]
    plain = _flat(_serve(PagedEngine(), [Request(prompt, SamplingParams(max_tokens=12),
                                                 request_id="a")]))["a"][0]
    stop = plain[6]
    assert stop not in plain[:6]
    params = SamplingParams(max_tokens=12, stop_token_ids=(stop,), min_tokens=7 * held)
    req = Request(prompt, params, request_id="b")
    expected = _flat(_serve(PagedEngine(), [req]))["b"]
    engine = _known({prompt: list(plain)})
    got = _serve(engine, [req])["b"]
    assert _flat({"b": got})["b"] == expected
    if not held:
        assert expected == (plain[:7], FinishReason.STOP)
        assert got[-1].token_ids == plain[5:7]  # the run cut after the stop, mid-run
    else:
        assert stop not in expected[0][:7]


def test_speculation_under_preemption_and_prefix_caching() -> None:
    """A pool of 12 blocks (192 tokens) for long repetitive requests: requests preempt and
    resume, share a cached prefix, and still get the plain engine's tokens."""
    shared = _repetitive(6)[1] * 4  # 5 x 5 x 4 = 100 tokens
    requests = [Request(shared + tail, SamplingParams(max_tokens=60), request_id=f"p{i}")
                for i, tail in enumerate(make_prompts([1, 2, 3, 4], seed=7))]
    plain = _flat(_serve(PagedEngine(num_blocks=12), requests))
    engine = PagedEngine(num_blocks=12, speculation=NGRAM)
    assert _flat(_serve(engine, requests)) == plain
    assert engine.preemptions > 0 and engine.prefix_cache_hits > 0
    assert engine.exercised()["spec_accepted_tokens"] > 0


def test_speculation_is_refused_with_a_foreign_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        PagedEngine(speculation=Speculation("draft", draft_model="small"))
    with pytest.raises(ValueError, match="method"):
        Speculation("medusa")
