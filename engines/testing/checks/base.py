"""One check: the object the registry (engines.testing.checks) lists, and that its property
is handed when it judges a trace, so that a check's name is written once, in its own file's
CHECK line. A property raises `check.fail(...)`, and a Violation names the check it came from.

What a check needs to run (a `Need`), the features it draws (`Use`s of engines.testing
.features), whether a search follows its seed workloads, when the state machine judges it,
and what it adds to the coverage summary (a `Tally`, beside its property) are its fields; the
registry decides from them, and nothing else decides by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from engines.testing.coverage import Tally
from engines.testing.features.base import Use
from engines.testing.judging.base import Judge, Violation
from engines.testing.limits import EngineLimits
from engines.testing.recorder import Trace

__all__ = ["Check", "Given", "Moment", "Need", "Property", "Use"]

# A property judges one Trace for its check: it raises check.fail(...), or returns what it
# judged (None, or what the check's tally adds to the coverage summary).
Property = Callable[["Check", Trace, Judge], Any]
# When the state machine judges a check besides at teardown (when it judges every check).
Moment = Literal["step", "bad request", "has_work lied"]


@dataclass(frozen=True, slots=True)
class Given:
    """What a run gives the checks: the engine's limits, a reference engine, config variants."""

    limits: EngineLimits
    reference: bool = False
    variants: bool = False
    kv_variants: bool = False  # some variant has KVIntrospection of its own


@dataclass(frozen=True, slots=True)
class Need:
    """Something a check cannot run without, and the skip reason where a run lacks it."""

    name: str  # what it is, for reading (a repr)
    met: Callable[[Given], bool]
    reason: str  # "{check}" stands for the check's name

    def skip_reason(self, check: str) -> str:
        return self.reason.format(check=check)


@dataclass(frozen=True, slots=True)
class Check:
    """One check: its name (in test ids, reports and `expected_failed_checks`), its property,
    what it needs, how it draws, when the state machine judges it, what it tallies, and the
    checks whose properties it judges again as part of its own (`rejudges`).

    Called with a trace and a judge, it runs its property, handing it itself."""

    name: str
    prop: Property | None  # None: the check runs the state machine instead of workloads
    needs: tuple[Need, ...] = ()  # the first one a run lacks is the skip reason
    # The features its workloads carry beside those every check's do (engines.testing
    # .features: `children.FEATURE.use()`), each with its setting.
    draws: tuple[Use, ...] = ()
    # A Hypothesis search after the seed workloads: not for a statistical check, judged once
    # on its seed workload (a search would multiply its false-alarm rate, and a replay of a
    # statistical failure is not a replay).
    search: bool = True
    # It judges seeded sampling: it draws seeded requests even where the engine declared it
    # broken (a strict xfail must be able to fail), and then no other check draws any.
    sampling: bool = False
    machine: frozenset[Moment] = frozenset()  # when the machine judges it before teardown
    # What a passing run's judgement (the property's return value) adds to the summary, and
    # the sentences its counters call for.
    tally: Tally | None = None
    # Checks whose properties this one re-judges (bad_input: the good requests beside refused
    # ones keep their parity and budgets); one the engine declares broken is left to its own
    # strict xfail.
    rejudges: tuple[Check, ...] = ()

    def __call__(self, trace: Trace, judge: Judge) -> Any:
        __tracebackhide__ = True
        if self.prop is None:
            raise ValueError(f"check {self.name!r} runs the state machine, not workloads")
        return self.prop(self, trace, judge)

    def fail(self, text: str) -> Violation:
        """The Violation this check raises: its message starts with the check's name."""
        return Violation(self.name, f"{self.name}: {text}")

    @property
    def runs(self) -> Literal["workloads", "machine"]:
        return "machine" if self.prop is None else "workloads"

    def skip_reason(self, given: Given) -> str | None:
        for need in self.needs:
            if not need.met(given):
                return need.skip_reason(self.name)
        return None
