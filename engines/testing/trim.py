"""A report keeps only the requests that matter: after the shrink, each request the finding
does not name is dropped in turn, and the drop kept where the failure still replays on a
fresh engine, the same way (the same check; for a crash, the same exception type).

Hypothesis' shrink and the suite's greedy one stop at a local minimum, or at the shrink
budget; a request that only rode along (one finished long before the failing step, one
whose presence changes nothing) often survives both. Dropping it is one replay each, bounded
by the same budget (engines.testing.shrink_budget).
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.testing import progress_lines as progress
from engines.testing.checks import catalogue
from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed, StepTimeout
from engines.testing.replays import replay_failure
from engines.testing.shrink import shrink_workload, without_requests
from engines.testing.shrink_budget import out_of_time
from engines.testing.verdict import Failure
from engines.testing.workload import Workload

__all__ = ["Trimmed", "fails_the_same_way", "keep_requests_that_matter", "shrunk"]

SLOW_TRIES = 4  # replays at most where each engine build takes long (EnginePool.cheap)


@dataclass(frozen=True, slots=True)
class Trimmed:
    workload: Workload
    failure: Failure  # how the kept workload failed on its last replay (the one reported)
    kept: int  # requests kept
    of: int  # requests before the trim
    cut: str = ""  # why it stopped before trying every request ("": it did not)
    tried: int = 0  # replays made

    def sentence(self) -> str:
        if self.kept < self.of:
            end = f" ({self.cut})" if self.cut else ""
            return (f"{self.kept} of {self.of} requests kept: the other {self.of - self.kept} "
                    f"were dropped, the failure still replaying on a fresh engine{end}.")
        if self.cut:
            return f"{self.kept} of {self.of} requests kept ({self.cut})."
        if not self.tried:
            return f"{self.kept} of {self.of} requests kept: the finding names each."
        return (f"{self.kept} of {self.of} requests kept: the failure did not replay without "
                "any one of those the finding does not name.")


def _text(error: AssertionError) -> str:
    return error.sentence if isinstance(error, EngineCrashed) else str(error)


def _same(a: AssertionError, b: AssertionError) -> bool:
    if getattr(a, "prop", None) != getattr(b, "prop", None):
        return False
    if isinstance(a, EngineCrashed) and isinstance(b, EngineCrashed):
        return type(a.exception) is type(b.exception)
    return True


def _one_replay_judges(error: AssertionError) -> bool:
    """Whether one replay's verdict stands for the failure: not for a statistical check's
    (engines.testing.checks: search=False), whose workload is sized for its bound."""
    found = next((c for c in catalogue() if c.name == getattr(error, "prop", None)), None)
    return found is None or found.search


def fails_the_same_way(ctx: SuiteContext, w: Workload, error: AssertionError) -> Failure | None:
    """How w fails on a fresh engine, where it fails as `error` did (same check; for a crash,
    the same exception type); else None."""
    again = replay_failure(ctx, w, error)
    return again if again is not None and _same(error, again.error) else None


def shrunk(ctx: SuiteContext, w: Workload, failure: Failure) -> tuple[Workload, Failure]:
    """w shrunk by the suite's greedy shrink (engines.testing.shrink), each try one run on a
    fresh engine, within the shrink budget; with how the smaller workload fails. For the
    state machine's findings, which Hypothesis does not shrink (engines.testing.stateful)."""
    progress.doing("shrinking the failing workload")
    small = shrink_workload(w, lambda c: fails_the_same_way(ctx, c, failure.error) is not None,
                            out_of_time=out_of_time)
    again = fails_the_same_way(ctx, small, failure.error)
    return (small, again) if again is not None else (w, failure)


def keep_requests_that_matter(ctx: SuiteContext, w: Workload, failure: Failure) -> Trimmed:
    """w without each request the failure's sentence does not name whose drop still fails."""
    of = len(w.requests)
    budget, tried = (of if ctx.pool.cheap else SLOW_TRIES), 0
    if isinstance(failure.error, EngineCrashed) and isinstance(failure.error.exception,
                                                               StepTimeout):
        return Trimmed(w, failure, of, of, "none dropped: the engine hangs, and each try "
                       "would wait out the step timeout")
    if not _one_replay_judges(failure.error):
        return Trimmed(w, failure, of, of, "none dropped: this check's verdict is statistical, "
                       "over the whole workload")
    cut = ""
    for rid in [r.request_id for r in w.requests]:
        if len(w.requests) <= 1:
            break
        if repr(rid) in _text(failure.error):
            continue
        if out_of_time():
            cut = "stopped by the shrink budget: not every request was tried"
            break
        if tried >= budget:
            cut = f"stopped after {SLOW_TRIES} tries: engines are slow to build"
            break
        tried += 1
        progress.doing("dropping the requests the failure does not need")
        index = next(i for i, r in enumerate(w.requests) if r.request_id == rid)
        trial = without_requests(w, {index})
        again = fails_the_same_way(ctx, trial, failure.error)
        if again is not None:
            w, failure = trial, again
    return Trimmed(w, failure, len(w.requests), of, cut, tried)
