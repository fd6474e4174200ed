"""The isolation check judged from an engine's own cached-token counts alone (the flavour for
servers): the paged engine behind a view with no block tables (tests/planted/count_bugs.py)
is caught when its prefix key ignores the salt and when it caches nothing for salted tenants,
and passes when correct. The paged engine's counts themselves: one per request, at its first
admission."""

from __future__ import annotations

import pytest

from engines.paged import PagedEngine
from engines.protocol import Request, SamplingParams, capabilities_of
from engines.testing.context import build_context
from engines.testing.recorder import run_workload
from engines.testing.workload import Workload
from tests.planted.count_bugs import COUNT_CONTROL, COUNT_PLANTED, CountsOnly
from tests.planted.harness import hunt, pinned

EXAMPLES = 12  # after the seed workloads, which catch both


@pytest.mark.parametrize("bug", list(COUNT_PLANTED), ids=lambda b: b.__name__)
def test_the_counts_catch_the_planted_tenant_bug(bug: object) -> None:
    ctx = build_context(bug, name=bug.__name__)  # type: ignore[arg-type,attr-defined]
    assert not ctx.limits.kv and ctx.limits.cached_counts  # the counts judge, nothing else
    caught = hunt(None, ctx=ctx, check=COUNT_PLANTED[bug], settings=pinned(EXAMPLES))  # type: ignore[index]
    assert caught is not None, f"{bug} passed isolation"
    assert str(caught).startswith("isolation:"), str(caught)[:400]
    assert "the engine's own count" in str(caught), str(caught)[:400]


def test_the_correct_engine_passes_on_its_counts() -> None:
    ctx = build_context(COUNT_CONTROL, name=COUNT_CONTROL.__name__)
    caught = hunt(None, ctx=ctx, check="isolation", settings=pinned(EXAMPLES))
    assert caught is None, str(caught)[:2000]


def test_the_paged_engine_reports_its_hits_once_per_request() -> None:
    engine = PagedEngine(block_size=4)
    assert "cached_prompt_tokens" in capabilities_of(engine).output_fields
    assert "cached_prompt_tokens" in capabilities_of(CountsOnly(engine)).output_fields
    prompt = tuple(range(1, 12))  # 11 tokens: two full blocks cacheable, the last computed
    params = SamplingParams(max_tokens=3)
    w = Workload((Request(prompt, params, request_id="a"),
                  Request(prompt, params, request_id="b"),
                  Request(prompt, params, request_id="c", cache_salt="s")), (0, 2, 2))
    trace = run_workload(engine, w)
    for rid, hits in (("a", 0), ("b", 8), ("c", 0)):
        counts = [o.cached_prompt_tokens for _, o in trace.outputs[rid]
                  if o.cached_prompt_tokens is not None]
        assert counts == [hits], (rid, counts)
