"""The paged engine's config variants (engines.paged.variants): each gives every request the
same tokens as the default engine, and each really exercises what it is for."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engines.models import preset_max_model_len
from engines.paged.engine import PagedEngine
from engines.paged.variants import VARIANTS
from engines.protocol import Request, SamplingParams, StepOutput, capabilities_of
from tests.helpers import make_prompts
from tests.kv_checks import drain_checked

SHARED = make_prompts([48], seed=21)[0]


def workload() -> tuple[list[Request], dict[int, list[Request]]]:
    """Short and long prompts (one of the whole context), a shared 3-block prefix, greedy
    and seeded requests; six arrive at once, the rest later."""
    lengths = [3, 250, 17, 1, 96, 40, 130, 64]
    prompts = make_prompts(lengths, seed=20)
    prompts += [SHARED + p for p in make_prompts([2, 5], seed=22)]
    budgets = [30, 4, 61, 9, 1, 20, 8, 12, 6, 6]
    requests = [Request(p, SamplingParams(max_tokens=n, temperature=0.8 * (i % 3 == 0),
                                          seed=i), request_id=f"r{i}")
                for i, (p, n) in enumerate(zip(prompts, budgets, strict=True))]
    whole = Request(make_prompts([510], seed=23)[0], SamplingParams(max_tokens=2),
                    request_id="whole")
    return requests[:6], {2: requests[6:8], 5: [requests[8], whole], 9: [requests[9]]}


def run(make: Callable[[], PagedEngine],
        on_step: Callable[[PagedEngine], None] | None = None) -> tuple[PagedEngine, dict]:
    engine = make()
    first, late = workload()

    def hook(step: int, outputs: list[StepOutput]) -> None:
        if on_step is not None:
            on_step(engine)

    got = drain_checked(engine, first, late=late, on_step=hook)
    return engine, {rid: tokens for rid, (tokens, _) in got.items()}


@pytest.fixture(scope="module")
def default_tokens() -> dict:
    engine, tokens = run(PagedEngine)
    assert engine.prefix_cache_hits > 0
    return tokens


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_gives_the_default_engines_tokens(name: str, default_tokens: dict) -> None:
    widest, steps = [0], [0]

    def watch(engine: PagedEngine) -> None:
        widest[0] = max(widest[0], len(engine.kv_block_tables()))
        steps[0] += 1

    engine, tokens = run(VARIANTS[name], watch)
    if "seeds" in capabilities_of(engine).expected_failed_checks:
        # It declares seeded sampling batch-dependent (speculative_draft_sampled: the draws a
        # step makes depend on its drafts): its greedy requests, r1, r2, r4..., must agree.
        sampled = {f"r{i}" for i in range(0, 10, 3)}
        tokens = {k: v for k, v in tokens.items() if k not in sampled}
        default_tokens = {k: v for k, v in default_tokens.items() if k not in sampled}
        assert tokens and len(tokens) == len(default_tokens)
    assert tokens == default_tokens
    if name == "no_prefix_caching":
        assert engine.prefix_cache_hits == 0
    elif name == "small_pool":
        assert engine.preemptions > 0
        assert engine.kv_total_blocks * engine.kv_block_size >= (
            preset_max_model_len("tiny") or 0), "the largest request must fit alone"
    elif name == "budget_8":
        assert engine.max_num_batched_tokens == 8
    elif name == "one_at_a_time":
        assert widest[0] == 1
    elif name.startswith("speculative_"):  # drafts verified, some accepted
        counts = engine.exercised()
        assert counts["spec_draft_tokens"] > counts["spec_accepted_tokens"] > 0
    elif name.startswith("compiled_"):  # the graph ran
        counts = engine.exercised()
        # "step" runs every step here in its graph where prompt rows attend through the
        # native kernel (their work is causal: no cap); otherwise, and in "graphs" (decodes
        # only), the prompt steps run eagerly.
        if name == "compiled_step" and engine.runner.native_rows:
            assert counts["compiled_steps"] == steps[0]
        else:
            assert 0 < counts["compiled_steps"] < steps[0]
        assert counts["compiled_fallback_steps"] == 0  # no shape ran out of graphs


def test_compiled_engines_of_several_shapes_share_their_graphs() -> None:
    """Engines of other seats, contexts and pools in one process, each over the workload:
    every step stays in a graph (torch.compile keeps 8 per function, shared by every engine
    in the process; a dim it guards per engine, such as a table slice's width or whether that
    slice happens to be contiguous, would use them up and send steps to the eager fallback,
    as 233 of the suite's ~14,400 compiled steps were under one seed before the graph took
    whole table rows)."""
    engines = [PagedEngine(compiled="step", max_batch_size=seats, max_model_len=context,
                           num_blocks=blocks, enable_prefix_caching=caching)
               for seats, context, blocks, caching in ((8, 512, None, True), (4, 512, 40, False),
                                                       (6, 384, 64, True), (8, 512, 90, True))]
    for engine in engines:
        first, late = workload()
        if engine.max_model_len < 512:  # the whole-context request does not fit
            late = {k: [r for r in v if r.request_id != "whole"] for k, v in late.items()}
        drain_checked(engine, first, late=late)
        counts = engine.exercised()
        assert counts["compiled_steps"] > 0
        assert counts["compiled_fallback_steps"] == 0, counts
