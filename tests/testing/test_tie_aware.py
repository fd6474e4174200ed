"""Tie-aware parity on a real reduced-precision engine: the continuous engine in bf16.

In bf16 a batch changes the rounding of the logits (the matmuls see other shapes), so a
request served in a batch can pick a different token than alone where two candidates sit an
ulp apart; exact parity calls that a bug. Tie-aware parity must forgive exactly those, with a
tolerance of a few bf16 ulps at the logits' scale, and nothing wider.
"""

from __future__ import annotations

import pytest

from engines.protocol import Request, SamplingParams
from engines.slot.continuous import ContinuousBatchEngine
from engines.testing.oracle import first_divergence
from tests.helpers import make_prompts

# bf16 keeps 8 significant bits: logits of magnitude 8-16 sit 1/16 apart. Two ulps there.
BF16_TOLERANCE = 0.125


def _serve(engine: ContinuousBatchEngine, requests: list[Request]) -> tuple[dict, dict]:
    tokens: dict = {r.request_id: [] for r in requests}
    tops: dict = {r.request_id: [] for r in requests}
    for request in requests:
        engine.add_request(request)
    while engine.has_work():
        for out in engine.step():
            tokens[out.request_id].extend(out.token_ids)
            tops[out.request_id].extend(out.top_logprobs or ())
    return tokens, tops


def _bf16() -> ContinuousBatchEngine:
    return ContinuousBatchEngine(dtype="bfloat16", max_batch_size=8)


def test_bf16_batching_diverges_only_at_near_ties() -> None:
    # Five candidates, as the suite asks for in tie-aware mode: a 4-way near-tie was seen.
    lengths = [3, 41, 17, 58, 9, 30, 12, 50, 25, 6, 44, 20]
    requests = [Request(p, SamplingParams(max_tokens=24, logprobs=5), request_id=i)
                for i, p in enumerate(make_prompts(lengths, seed=1))]
    batched, batched_top = _serve(_bf16(), requests)
    divergences = []
    for request in requests:
        alone, alone_top = _serve(_bf16(), [request])
        rid = request.request_id
        d = first_divergence(batched[rid], alone[rid], observed_top=batched_top[rid],
                             expected_top=alone_top[rid], mode="tie-aware",
                             tolerance=BF16_TOLERANCE)
        if d is not None:
            divergences.append(d)
    if not divergences:
        pytest.skip("this CPU's bf16 kernels gave batch-invariant logits: no tie to forgive")
    assert all(d.accepted for d in divergences), divergences
    # Near-ties in bf16 terms, far from ties in fp32 terms: exact mode (and the fp32
    # default tolerance) would have reported every one of them.
    assert all(d.margin is not None and 1e-3 < d.margin <= BF16_TOLERANCE for d in divergences)
