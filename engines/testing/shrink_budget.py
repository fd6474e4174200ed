"""A time budget for shrinking a check's failure (--shrink-budget, 60 s by default).

Hypothesis shrinks a failure until it can shrink no further, or for five minutes, then stops
with a warning that ends "PLEASE REPORT THIS" (to Hypothesis): a state machine over a real
engine, whose every shrink step replays whole engine runs, took that long and got that
warning in issue 51. The five minutes are Hypothesis' `MAX_SHRINKING_SECONDS`, which its
source keeps monkeypatchable for exactly this; the suite sets it to its budget for the length
of one check, restores it after, swallows the warning (it is about Hypothesis' shrinker, and
the user can do nothing with it) and says instead, under the failure, that the shrink was cut
short and what that means. The suite's own greedy shrink of a failing seed workload
(engines.testing.shrink) stops at the same budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from hypothesis.internal.conjecture import engine as conjecture_engine
from hypothesis.reporting import current_reporter, with_reporter
from hypothesis.statistics import collector

__all__ = ["DEFAULT_BUDGET", "ShrinkBudget", "bounded_shrinking", "out_of_time"]

DEFAULT_BUDGET = 60
# What Hypothesis' statistics say when it stopped shrinking on its time limit (its
# ExitReason.very_slow_shrinking), and the words that end the warning it prints then.
_SLOW = "shrinking was very slow"
_WARNING = "PLEASE REPORT THIS"


class ShrinkBudget:
    """One check's shrink budget: how long its shrinking may take, and whether a shrink, the
    suite's or Hypothesis', was cut short by it."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        self.cut = False
        self._started: float | None = None

    def out_of_time(self) -> bool:
        """For the suite's own shrink: True once `seconds` have passed since its first call."""
        now = time.monotonic()
        if self._started is None:
            self._started = now
        if now - self._started >= self.seconds:
            self.cut = True
        return self.cut

    def note(self) -> str:
        return (f"Shrinking was cut short by the {self.seconds} s shrink budget "
                "(--shrink-budget=S): the failing example above is the smallest found by "
                "then, not necessarily the smallest there is. A larger budget shrinks further; "
                "the failure is the same either way.")


_current: ContextVar[ShrinkBudget | None] = ContextVar("shrink_budget", default=None)


def out_of_time() -> bool:
    """Whether the running check's shrink budget is spent (False outside bounded_shrinking)."""
    budget = _current.get()
    return budget is not None and budget.out_of_time()


@contextmanager
def bounded_shrinking(seconds: int = DEFAULT_BUDGET) -> Iterator[ShrinkBudget]:
    """Within it, Hypothesis (and the suite's seed shrink) shrink for at most `seconds`; an
    exception leaving it carries a note saying so where the budget cut a shrink short."""
    __tracebackhide__ = True
    budget = ShrinkBudget(seconds)
    report_on = current_reporter()
    stats_to: Any = collector.value  # Hypothesis' pytest plugin's, under pytest

    def report(message: object) -> None:
        if isinstance(message, str) and _WARNING in message:
            budget.cut = True  # said by the note instead
            return
        report_on(message)

    def statistics(stats: Any) -> None:
        if stats.get("stopped-because") == _SLOW:
            budget.cut = True
        if stats_to is not None:
            stats_to(stats)

    saved = conjecture_engine.MAX_SHRINKING_SECONDS
    conjecture_engine.MAX_SHRINKING_SECONDS = seconds
    token = _current.set(budget)
    try:
        # Hypothesis types its collector DynamicVariable(None); it holds a callback.
        with with_reporter(report), collector.with_value(statistics):  # type: ignore[arg-type]
            yield budget
    except BaseException as exc:
        if budget.cut:
            exc.add_note(budget.note())
        raise
    finally:
        _current.reset(token)
        conjecture_engine.MAX_SHRINKING_SECONDS = saved
