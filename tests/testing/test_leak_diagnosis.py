"""A failure that needs the engine's history is called a leak only from replays: the history
reproduces it and the workload alone does not, and where unseeded sampling could explain it by
chance, only if the replays with every such request seeded still show it."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from engines.protocol import Request, SamplingParams
from engines.testing import report
from engines.testing.workload import Workload


def _w(*params: SamplingParams) -> Workload:
    reqs = tuple(Request((1, 2), p, request_id=f"r{i}") for i, p in enumerate(params))
    return Workload(reqs, (0,) * len(reqs))


GREEDY = SamplingParams(max_tokens=2)
UNSEEDED = SamplingParams(max_tokens=2, temperature=1.0)


def _diagnose(monkeypatch: pytest.MonkeyPatch, earlier: list[Workload], w: Workload,
              plain: tuple[int, int], seeded: tuple[int, int] = (0, 0)) -> tuple[str, bool]:
    """The diagnosis where replays give `plain` (after the history, alone) and, once every
    unseeded request is seeded, `seeded`."""
    def replays(ctx: Any, e: Sequence[Workload], x: Workload, check: str,
                n: int) -> tuple[int, int]:
        unseeded = report._unseeded([*e, x])
        return seeded if unseeded == 0 and report._unseeded([*earlier, w]) else plain

    monkeypatch.setattr(report, "_replays", replays)
    ctx = SimpleNamespace(pool=SimpleNamespace(cheap=True))
    return report._diagnosis(ctx, earlier, w, "liveness")  # type: ignore[arg-type]


def test_a_deterministic_leak_is_called_one(monkeypatch: pytest.MonkeyPatch) -> None:
    text, leak = _diagnose(monkeypatch, [_w(GREEDY)], _w(GREEDY), plain=(5, 0))
    assert leak and "reproduced 5 of 5; the workload alone, 0 of 5" in text
    assert "state leaks across requests" in text


def test_chance_is_named_where_unseeded_draws_could_explain_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The history seems to matter, but seeded, the failure is gone both ways: chance.
    text, leak = _diagnose(monkeypatch, [_w(UNSEEDED)], _w(GREEDY), plain=(2, 0),
                           seeded=(0, 0))
    assert not leak and "state leaks" not in text
    assert "1 request(s) sample without a seed" in text and "chance" in text
    # Seeded, it still needs the history: a leak after all.
    text, leak = _diagnose(monkeypatch, [_w(UNSEEDED)], _w(GREEDY), plain=(2, 0),
                           seeded=(5, 0))
    assert leak and "with each of them seeded, after the earlier workload(s) 5 of 5" in text


def test_a_failure_alone_is_not_a_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    text, leak = _diagnose(monkeypatch, [_w(GREEDY)], _w(GREEDY), plain=(3, 2))
    assert not leak and "fails without the history too" in text
    text, leak = _diagnose(monkeypatch, [_w(GREEDY)], _w(GREEDY), plain=(0, 0))
    assert not leak and "Not reproduced" in text


def test_seeding_keeps_ids_and_seeds_only_the_unseeded() -> None:
    w = _w(UNSEEDED, GREEDY, SamplingParams(max_tokens=2, temperature=1.0, seed=7))
    seeded = report._seeded(w, 100)
    assert [r.request_id for r in seeded.requests] == ["r0", "r1", "r2"]
    assert [r.params.seed for r in seeded.requests] == [100, None, 7]
    assert report._unseeded([seeded]) == 0 and report._unseeded([w]) == 1
