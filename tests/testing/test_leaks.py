"""minimal_leak on a synthetic leak: which earlier workloads it keeps, and its shrinking."""

from __future__ import annotations

from collections.abc import Sequence

from engines.protocol import Request, SamplingParams
from engines.testing.leaks import minimal_leak
from engines.testing.workload import Workload


def _w(n: int, tag: str) -> Workload:
    reqs = tuple(Request((1, 2, 3), SamplingParams(max_tokens=2), request_id=f"{tag}{i}")
                 for i in range(n))
    return Workload(reqs, (0,) * n)


def _exhausts(blocks: int):  # type: ignore[no-untyped-def]
    # A pool of `blocks` that every request leaks: w fails once the history used them up.
    def fails_after(earlier: Sequence[Workload], w: Workload) -> bool:
        return sum(len(e.requests) for e in earlier) + len(w.requests) > blocks

    return fails_after


def test_the_most_recent_workload_alone_when_it_suffices() -> None:
    history = [_w(1, "a"), _w(2, "b"), _w(6, "c"), _w(1, "d")]
    earlier, w = minimal_leak(history, _w(3, "x"), _exhausts(8), shrink=False)
    assert earlier == [history[2]] and w == _w(3, "x")


def test_drops_what_the_failure_does_not_need_then_shrinks() -> None:
    history = [_w(3, "a"), _w(1, "b"), _w(3, "c"), _w(2, "d")]
    fails_after = _exhausts(8)
    earlier, w = minimal_leak(history, _w(2, "x"), fails_after, shrink=False)
    assert fails_after(earlier, w) and len(earlier) < len(history)
    shrunk, w2 = minimal_leak(history, _w(2, "x"), fails_after, shrink=True)
    assert fails_after(shrunk, w2) and not fails_after([], w2)
    # Every request left is needed: dropping any one makes the failure go away.
    total = sum(len(e.requests) for e in shrunk) + len(w2.requests)
    assert total == 9 and all(len(r.prompt_token_ids) == 1 for e in shrunk for r in e.requests)


def test_a_failure_that_does_not_replay_is_returned_as_found() -> None:
    history = [_w(2, "a")]
    earlier, w = minimal_leak(history, _w(1, "x"), lambda e, c: False, shrink=True)
    assert earlier == history and w == _w(1, "x")
