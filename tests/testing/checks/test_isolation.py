"""isolation: its planted bugs caught and the correct engines passing, three ways. On the
paged engine with the zoo's adapters, from its block tables (tests/planted/lora_bugs.py). From
an engine's own cached-token counts alone (the flavour for servers): the paged engine behind
a view with no block tables (tests/planted/count_bugs.py), and the fake server's prefix
cache over HTTP (tests/planted/server_bugs.py), each caught when its prefix key ignores the
salt and when it caches nothing for salted tenants. The paged engine's counts themselves:
one per request, at its first admission."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pytest

from engines.paged import PagedEngine
from engines.protocol import Request, SamplingParams, capabilities_of
from engines.testing.context import build_context
from engines.testing.recorder import run_workload
from engines.testing.workload import Workload
from engines.zoo import paged_with_loras
from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, name_of, planted
from tests.planted.count_bugs import COUNT_CONTROL, COUNT_PLANTED, CountsOnly
from tests.planted.harness import hunt, pinned
from tests.planted.lora_bugs import LORA_PLANTED
from tests.planted.tenants import caught_on_the_zoos_adapters, lora_context, settings_for


def _servers() -> ModuleType | None:
    """The fake server's planted bugs, which need httpx (the optional extra `http`): without
    it their tests are collected from an empty list, which pytest reports as skipped."""
    try:
        return importlib.import_module("tests.planted.server_bugs")
    except ImportError:
        return None


CHECK = "isolation"
EXAMPLES = 12  # after the seed workloads, which catch both
SERVERS = _servers()


@pytest.mark.parametrize("bug", planted(CHECK, LORA_PLANTED), ids=name_of)
def test_the_suite_catches_the_planted_lora_bug(bug: Any) -> None:
    caught_on_the_zoos_adapters(bug)


def test_the_correct_engine_with_loras_passes() -> None:
    expect.passes(paged_with_loras, CHECK, settings_for(CHECK), lora_context(paged_with_loras))


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))


@pytest.mark.parametrize("bug", planted(CHECK, COUNT_PLANTED), ids=name_of)
def test_the_counts_catch_the_planted_tenant_bug(bug: Any) -> None:
    ctx = build_context(bug, name=bug.__name__)
    assert not ctx.limits.kv and ctx.limits.cached_counts  # the counts judge, nothing else
    caught = hunt(None, ctx=ctx, check=bug.caught_by, settings=pinned(EXAMPLES))
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


@pytest.mark.parametrize("bug", planted(CHECK, SERVERS.TENANT_PLANTED if SERVERS else []),
                         ids=name_of)
def test_the_counts_catch_the_planted_server_bug(bug: Any) -> None:
    try:
        caught = hunt(bug, settings=pinned(EXAMPLES))
    finally:
        bug.close()
    assert caught is not None, f"{bug.__name__} passed isolation"
    assert str(caught).startswith("isolation:"), str(caught)[:400]
    assert "the engine's own count" in str(caught), str(caught)[:400]


def test_the_correct_server_passes_on_its_counts() -> None:
    if SERVERS is None:
        pytest.skip("httpx (the optional extra `http`) is not installed")
    control = SERVERS.TENANT_CONTROL
    try:
        caught = hunt(control, settings=pinned(EXAMPLES), check=CHECK)
    finally:
        control.close()
    assert caught is None, str(caught)[:2000]
