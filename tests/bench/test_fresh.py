"""Every paired run of a comparison sends prompts no earlier run sent (engines.bench.fresh)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from engines.bench import comparison, draws, traces
from engines.bench.config import Config
from engines.bench.draws import WorkItem
from engines.bench.fresh import FreshPrompts, shifted
from engines.bench.run_context import RunContext
from engines.paged.variants import equal_memory
from engines.protocol import Request, StepOutput

VOCAB = 50


def test_a_run_moves_the_first_token_and_nothing_else() -> None:
    prompt = (3, 7, 7, 49)
    assert shifted(prompt, 0, VOCAB) == prompt
    seen = {shifted(prompt, run, VOCAB) for run in range(3 * VOCAB)}
    assert len(seen) == 3 * VOCAB  # distinct past the vocabulary too (the second token)
    for run in range(3 * VOCAB):
        moved = shifted(prompt, run, VOCAB)
        assert len(moved) == len(prompt) and moved[2:] == prompt[2:]
        assert all(0 <= t < VOCAB for t in moved)


def test_a_paired_run_gives_every_engine_the_same_prompts_and_the_next_run_others() -> None:
    shared = (1, 2, 3, 4, 5)
    items = [WorkItem(shared, 2), WorkItem(shared[:3] + (9, 9), 3), WorkItem((8,), 1)]
    slow, fast = traces.poisson(items, 1.0, seed=1), traces.poisson(items, 4.0, seed=1)
    fresh = FreshPrompts(VOCAB)
    first = fresh.next({"a": slow, "b": fast})
    assert first["a"] is slow  # run 0: the trace as drawn
    second = fresh.next({"a": slow, "b": fast})

    def prompts(trace: traces.ArrivalTrace) -> list[tuple[int, ...]]:
        return [a.item.prompt_token_ids for a in trace.arrivals]

    assert prompts(second["a"]) == prompts(second["b"])
    assert all(p != q for p, q in zip(prompts(second["a"]), prompts(slow), strict=True))
    # What the trace's prompts share they still share; only the run's number moved them.
    a, b, _ = prompts(second["a"])
    assert a[:3] == b[:3]
    # The workload is the trace's own: ids, arrival times, budgets.
    for before, after in zip(fast.arrivals, second["b"].arrivals, strict=True):
        assert (after.at_s, after.request_id, after.item.max_tokens) == \
            (before.at_s, before.request_id, before.item.max_tokens)
    with pytest.raises(ValueError, match="vocab_size"):
        FreshPrompts(1)


class CountsCachedTokens:
    """An engine as the bench sees it, summing the cached prompt tokens its outputs report."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.cached = engine, 0

    def add_request(self, request: Request) -> None:
        self.engine.add_request(request)

    def has_work(self) -> bool:
        return bool(self.engine.has_work())

    def step(self) -> Sequence[StepOutput]:
        outputs: Sequence[StepOutput] = self.engine.step()
        self.cached += sum(o.cached_prompt_tokens or 0 for o in outputs)
        return outputs


@pytest.mark.parametrize("fresh", [True, False])
def test_no_closed_run_finds_the_run_before_it_in_a_prefix_cache(fresh: bool) -> None:
    engine = equal_memory(model="tiny", enable_prefix_caching=True)
    counted = CountsCachedTokens(engine)
    trace = traces.closed(draws.uniform(6, prompt_len=40, max_tokens=2,
                                        vocab_size=engine.vocab_size))
    ctx = RunContext(fresh=FreshPrompts(engine.vocab_size) if fresh else None)
    ctx.closed({"paged": counted}, trace, warmup=1, runs=2)  # type: ignore[dict-item]
    if fresh:
        assert counted.cached == 0
    else:  # the carry-over the shift removes: every replay hits the run before it
        assert counted.cached >= 2 * 6 * 32


def test_a_comparison_shifts_prompts_unless_told_to_send_them_as_drawn() -> None:
    assert isinstance(comparison.context(Config(), VOCAB).fresh, FreshPrompts)
    assert comparison.context(Config(fresh_prompts=False), VOCAB).fresh is None
