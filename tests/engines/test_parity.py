"""Token parity of the reference engines with transformers' own generate (greedy, fp32).

The four cases the serving series' continuous-batching part checked (docs/references.md): a
single request, a uniform batch, a mixed batch, and 8 requests forced through 4 slots.
"""

from __future__ import annotations

import pytest

from tests.helpers import drain, greedy, hf_generate, make_prompts

CASES = {
    "single": ([37], [12]),
    "uniform": ([24] * 4, [10] * 4),
    "mixed": ([3, 250, 17, 1, 96, 40], [30, 4, 61, 9, 1, 20]),
    "8-through-4": ([5, 80, 12, 33, 160, 7, 64, 20], [14, 3, 25, 8, 6, 40, 11, 2]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers_generate(engine_cls: type, case: str) -> None:
    lengths, budgets = CASES[case]
    prompts = make_prompts(lengths, seed=len(case))
    requests = greedy(prompts, budgets)
    got = drain(engine_cls(max_batch_size=4), requests)
    for request, budget in zip(requests, budgets, strict=True):
        tokens, _ = got[request.request_id]
        expected = hf_generate(request.prompt_token_ids, budget)
        assert tokens == expected, (
            f"{case}: request {request.request_id} (prompt {len(request.prompt_token_ids)}, "
            f"budget {budget}) diverged from transformers generate"
        )
