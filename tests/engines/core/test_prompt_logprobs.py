"""Prompt logprobs on our engines against the oracle nobody here wrote: a plain teacher-forced
transformers forward of the preset, log-softmax over the prompt. Each engine is served prompts
that share whole KV blocks after a warm-up request cached them, in chunks and not; the paged
engine recomputes a prompt-logprobs request's prefix instead of taking cached blocks
(engines/paged/engine.py), and still caches its blocks for others."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence

import pytest
import torch

from engines.models import DEFAULT_PRESET, load_model
from engines.paged.engine import PagedEngine
from engines.protocol import Engine, Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from tests.helpers import make_prompts
from tests.planted.paged_bugs import PromptLogprobsStaleOnHit

K = 3
TOL = 1e-4  # fp32, our kernels against transformers' modules (measured: at most 3.9e-6)

Entries = Sequence[Mapping[int, float] | None]


def _oracle(prompt: Sequence[int]) -> list[torch.Tensor]:
    model = load_model(DEFAULT_PRESET, seed=0, device=torch.device("cpu"), dtype=torch.float32)
    with torch.no_grad():
        raw = model(torch.tensor([list(prompt)])).logits[0].float().log_softmax(-1)
    return [raw[i - 1] for i in range(1, len(prompt))]  # position i's distribution


def _serve(engine: Engine, requests: Sequence[Request]) -> dict[Hashable, Entries]:
    for r in requests:
        engine.add_request(r)
    got: dict[Hashable, Entries] = {}
    first: set[Hashable] = set()
    while engine.has_work():
        for out in engine.step():
            if out.request_id in first:
                assert out.prompt_logprobs is None, "prompt logprobs after the first output"
                continue
            first.add(out.request_id)
            if out.prompt_logprobs is not None:
                got[out.request_id] = out.prompt_logprobs
    return got


def _worst(prompt: Sequence[int], entries: Entries) -> float:
    assert len(entries) == len(prompt) and entries[0] is None
    worst = 0.0
    for i, dist in enumerate(_oracle(prompt), start=1):
        entry = entries[i]
        if entry is None or prompt[i] not in entry:
            return math.inf  # another prompt's entry (the planted bug's)
        assert K <= len(entry) <= K + 1
        if not set(dist.topk(K).indices.tolist()) <= set(entry):
            return math.inf
        for token, value in entry.items():
            worst = max(worst, abs(value - dist[token].item()))
    return worst


FACTORIES: dict[str, Callable[[], Engine]] = {
    "sequential": SequentialEngine,
    "continuous": ContinuousBatchEngine,
    "static": StaticBatchEngine,
    "paged": PagedEngine,
    # Chunked prefill: 8 tokens a step, even with nothing decoding.
    "paged-chunked": lambda: PagedEngine(max_batch_size=4, max_num_batched_tokens=8,
                                         max_prefill_only_tokens=8),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_prompt_logprobs_equal_a_teacher_forced_forward(name: str) -> None:
    shared, a, b = make_prompts([32, 5, 9], seed=41)
    prompts = [shared + a, shared + b, (7,), a]
    engine = FACTORIES[name]()
    _serve(engine, [Request(shared + (1, 2), SamplingParams(max_tokens=2))])  # caches shared
    requests = [Request(p, SamplingParams(max_tokens=3, prompt_logprobs=K), request_id=f"r{i}")
                for i, p in enumerate(prompts)]
    got = _serve(engine, requests)
    assert set(got) == {r.request_id for r in requests}
    for r in requests:
        assert _worst(r.prompt_token_ids, got[r.request_id]) < TOL, r.request_id
    if isinstance(engine, PagedEngine):  # nothing of the prompts came from the cache ...
        assert engine.prefix_cache_hits == 0
        later = Request(shared + (3,), SamplingParams(max_tokens=1))
        _serve(engine, [later])  # ... and their blocks still serve a plain request
        assert engine.prefix_cache_hits == 2


def test_paged_prompt_logprobs_survive_preemption_mid_prefill() -> None:
    """A request preempted after some chunks keeps its entries and computes only the rest."""
    engine = PagedEngine(max_batch_size=2, max_num_batched_tokens=8, max_prefill_only_tokens=8,
                         num_blocks=6, max_model_len=96)
    p0, p1 = make_prompts([40, 40], seed=42)
    requests = [Request(p0, SamplingParams(max_tokens=30, prompt_logprobs=K), request_id="a"),
                Request(p1, SamplingParams(max_tokens=30, prompt_logprobs=K), request_id="b")]
    got = _serve(engine, requests)
    assert engine.preemptions > 0
    for r in requests:
        assert _worst(r.prompt_token_ids, got[r.request_id]) < TOL


@pytest.mark.parametrize("cls", [PromptLogprobsStaleOnHit, PagedEngine],
                         ids=lambda c: c.__name__)
def test_prompt_logprobs_stale_after_a_prefix_hit(cls: type[PagedEngine]) -> None:
    """C shares A's first block while B, admitted after A, runs: the planted engine copies
    C's cached positions from B; the real one recomputes them."""
    shared, other, a, b, c = make_prompts([16, 16, 4, 4, 4], seed=43)
    engine = cls()
    ra = Request(shared + a, SamplingParams(max_tokens=12, prompt_logprobs=K), request_id="a")
    rb = Request(other + b, SamplingParams(max_tokens=12, prompt_logprobs=K), request_id="b")
    rc = Request(shared + c, SamplingParams(max_tokens=2, prompt_logprobs=K), request_id="c")
    for r in (ra, rb):
        engine.add_request(r)
    got: dict[Hashable, Entries] = {}
    for out in engine.step():  # A and B prefilled: A's first block is cached
        if out.prompt_logprobs is not None:
            got[out.request_id] = out.prompt_logprobs
    got.update(_serve(engine, [rc]))
    stale = _worst(rc.prompt_token_ids, got["c"]) > 1e-2
    assert stale == (cls is PromptLogprobsStaleOnHit)
    assert _worst(ra.prompt_token_ids, got["a"]) < TOL
