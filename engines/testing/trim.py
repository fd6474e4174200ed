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
from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed
from engines.testing.replays import replay_failure
from engines.testing.shrink import without_requests
from engines.testing.shrink_budget import out_of_time
from engines.testing.verdict import Failure
from engines.testing.workload import Workload

__all__ = ["Trimmed", "keep_requests_that_matter"]

SLOW_TRIES = 4  # replays at most where each engine build takes long (EnginePool.cheap)


@dataclass(frozen=True, slots=True)
class Trimmed:
    workload: Workload
    failure: Failure  # how the kept workload failed on its last replay (the one reported)
    kept: int  # requests kept
    of: int  # requests before the trim
    cut: bool = False  # stopped by the shrink budget (or the slow-engine cap) before the end

    def sentence(self) -> str:
        end = (" (stopped early by the shrink budget: not every one was tried)"
               if self.cut else "")
        if self.kept < self.of:
            return (f"{self.kept} of {self.of} requests kept: the other {self.of - self.kept} "
                    f"were dropped, the failure still replaying on a fresh engine{end}.")
        return (f"{self.kept} of {self.of} requests kept: the failure did not replay without "
                f"any one of those the sentence does not name{end}.")


def _text(error: AssertionError) -> str:
    return error.sentence if isinstance(error, EngineCrashed) else str(error)


def _same(a: AssertionError, b: AssertionError) -> bool:
    if getattr(a, "prop", None) != getattr(b, "prop", None):
        return False
    if isinstance(a, EngineCrashed) and isinstance(b, EngineCrashed):
        return type(a.exception) is type(b.exception)
    return True


def keep_requests_that_matter(ctx: SuiteContext, w: Workload, failure: Failure) -> Trimmed:
    """w without each request the failure's sentence does not name whose drop still fails."""
    of = len(w.requests)
    tries = of if ctx.pool.cheap else SLOW_TRIES
    cut = False
    for rid in [r.request_id for r in w.requests]:
        if len(w.requests) <= 1:
            break
        if repr(rid) in _text(failure.error):
            continue
        if tries <= 0 or out_of_time():
            cut = True
            break
        tries -= 1
        progress.doing("dropping the requests the failure does not need")
        index = next(i for i, r in enumerate(w.requests) if r.request_id == rid)
        trial = without_requests(w, {index})
        again = replay_failure(ctx, trial, failure.error)
        if again is not None and _same(failure.error, again.error):
            w, failure = trial, again
    return Trimmed(w, failure, len(w.requests), of, cut)
