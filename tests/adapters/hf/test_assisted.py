"""transformers' assisted generation (engines.adapters.hf.assisted), an implementation of
speculative decoding nobody here wrote, as an independent reference for our paged engine's
drafters: greedy, every request's tokens from our speculating variants equal the library's
with the same draft model / prompt lookup, served alone, and batched on our side."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from engines.adapters.hf.assisted import hf_assisted_draft, hf_assisted_lookup
from engines.paged.variants import speculative_draft, speculative_ngram
from engines.protocol import Request, SamplingParams, capabilities_of

PROMPTS = [(5, 9, 14, 5, 9, 14, 5, 9), (3, 1, 4, 1, 5, 9, 2, 6), (881, 2, 881, 2, 881),
           (700, 12, 45, 700, 12)]


def _run(engine: Any, requests: list[Request]) -> dict[str, list[int]]:
    for r in requests:
        engine.add_request(r)
    out: dict[str, list[int]] = defaultdict(list)
    while engine.has_work():
        for o in engine.step():
            out[o.request_id] += list(o.token_ids)
    return dict(out)


@pytest.mark.parametrize(("ours", "theirs"), [(speculative_draft, hf_assisted_draft),
                                               (speculative_ngram, hf_assisted_lookup)],
                         ids=["draft", "lookup"])
def test_our_speculation_matches_assisted_generation(ours: Any, theirs: Any) -> None:
    requests = [Request(p, SamplingParams(max_tokens=24), request_id=f"r{i}")
                for i, p in enumerate(PROMPTS)]
    engine = ours()
    got = _run(engine, requests)  # batched on our side
    expected = _run(theirs(), requests)  # one at a time, the library's own verification
    assert got == expected
    assert engine.exercised()["spec_draft_tokens"] > 0


def test_assisted_declares_greedy_only() -> None:
    engine = hf_assisted_lookup()
    assert "temperature" not in capabilities_of(engine).supported_sampling
