"""liveness: every request finishes, has_work() tells the truth, no output for an unknown id, an
abort takes effect within two steps."""

from __future__ import annotations

from engines.testing.checks.base import Check
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_liveness"]


def check_liveness(check: Check, trace: Trace, judge: Judge) -> None:
    """Every request finishes within the step bound; has_work() tells the truth; no output
    for an id the engine was never given; an abort takes effect within two steps."""
    __tracebackhide__ = True
    w = trace.workload
    if trace.stalled:
        stuck = [r for r in w.requests if r.request_id not in trace.finished_at
                 and w.arrivals[w.requests.index(r)] < len(trace.steps)]
        r = stuck[0]
        raise check.fail(
            f"{describe(r, trace)} had not finished after {len(trace.steps)} steps (the bound "
            f"for this workload); it had {trace.tokens(r.request_id)} so far, and "
            f"{len(stuck)} request(s) were unfinished: {[x.request_id for x in stuck]}.",
        )
    if trace.has_work_errors:
        step, text = trace.has_work_errors[0]
        raise check.fail(f"before step {step}, {text}.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            continue  # the bad-input property's to report
        raise check.fail(f"step {step} returned an output for request id "
                         f"{out.request_id!r}, which the engine was never given: {out}.")
    for rid, at in trace.aborted_at.items():
        done = trace.finished_at.get(rid)
        if done is None or done > at + 1:
            raise check.fail(
                f"request {rid!r} was aborted before step {at} but "
                + (f"only finished in step {done}" if done is not None else "never finished")
                + f". Expected its last output by step {at + 1}.",
            )


CHECK = Check("liveness", check_liveness, machine=frozenset({"has_work lied"}))
