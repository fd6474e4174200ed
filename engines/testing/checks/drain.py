"""drain (LoadIntrospection: servers, from their own metrics): once every request finished and
has_work() turned False, the engine's own count shows nothing running or waiting, and KV use
back to its value before the workload. A request the server still runs after its stream ended,
or blocks it still holds, is a leak on a live server that no token comparison sees."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.checks.needs import LOAD
from engines.testing.judging.base import Judge
from engines.testing.recorder import Trace, load_left

__all__ = ["CHECK", "check_drain"]


def check_drain(check: Check, trace: Trace, judge: Judge) -> None:
    """After the drain (and the engine's load_settle_s), its own load report is at rest."""
    __tracebackhide__ = True
    before, after = trace.load_before, trace.load_after_drain
    if before is None or after is None or trace.stalled:
        return
    left = load_left(before, after)
    if left is not None:
        where = f" ({after.source})" if after.source else ""
        raise check.fail(f"every request finished and has_work() turned False, yet "
                         f"{trace.load_waited_s:.1f} s later the engine's own load report{where} "
                         f"still shows {left}. Expected nothing running or waiting and KV usage "
                         f"back to its value before the workload: a request or its KV blocks "
                         "leaked.")


CHECK = Check("drain", check_drain, needs=(LOAD,))
