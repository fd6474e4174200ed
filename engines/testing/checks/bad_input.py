"""bad_input: bad requests are refused with InvalidRequest and change nothing."""

from __future__ import annotations

from collections.abc import Mapping

from engines.testing.checks.base import Check
from engines.testing.checks.budget_finish import CHECK as BUDGET_FINISH
from engines.testing.checks.parity import CHECK as PARITY
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.bad_requests import FEATURE as BAD_REQUESTS_FEATURE
from engines.testing.judging.base import Judge, Violation
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "check_bad_input"]


def check_bad_input(check: Check, trace: Trace, judge: Judge) -> tuple[str, ...]:
    """Bad requests are refused with InvalidRequest (a ValueError) and change nothing: every
    good request still passes the checks this one re-judges (`check.rejudges`: its alone
    tokens, its budget). Returns those it did not re-run on the good requests because the
    engine declares them broken (for the summary: BAD_INPUT_TALLY)."""
    __tracebackhide__ = True
    w = trace.workload
    for b, refused in zip(w.bad, trace.refusals, strict=False):
        shown = b.duplicate_of if b.duplicate_of is not None else b.request.request_id
        if refused is None:
            raise check.fail(
                f"add_request accepted a bad request before step {b.step} "
                f"({b.kind}: {b.request}, request_id {shown!r}). Expected InvalidRequest.")
        if not isinstance(refused, ValueError):
            raise check.fail(f"add_request refused a bad request before step {b.step} "
                             f"({b.kind}) with {type(refused).__name__}: {refused}. Expected "
                             "InvalidRequest (a ValueError).")
    side_effects = trace.bad_side_effects + (trace.has_work_errors if w.bad else [])
    if side_effects:
        step, text = side_effects[0]
        raise check.fail(f"before step {step}, {text}. Expected a refused request "
                         "to leave the engine exactly as it was.")
    bad_ids = {str(b.request.request_id) for b in w.bad}
    for step, out in trace.stray:
        if str(out.request_id).split("#")[0] in bad_ids:
            raise check.fail(f"step {step} returned an output for a refused request: "
                             f"{out}. Expected none.")
    if not w.bad:
        return ()
    left = tuple(c.name for c in check.rejudges if c.name in judge.declared)
    try:
        for other in check.rejudges:
            if other.name not in left:
                other(trace, judge)
    except Violation as v:
        raise check.fail(f"after refusing {len(w.bad)} bad request(s), the good "
                         f"ones changed. {v}") from None
    return left


def _add_unrechecked(coverage: Coverage, left: tuple[str, ...], check: str) -> None:
    """bad_input's re-checks of the good requests left to their own declared xfail."""
    for name in left:
        coverage.most[f"{check}: not re-checked, declared broken: {name}"] = 1


def _unrechecked_notes(data: Mapping[str, int], check: str) -> list[str]:
    prefix = f"max {check}: not re-checked, declared broken: "
    left = sorted(k.removeprefix(prefix) for k in data if k.startswith(prefix))
    if not left:
        return []
    return [f"{check}: the good requests beside refused ones were not re-checked for "
            f"{', '.join(left)}, which the engine declares broken (its own strict xfail "
            "judges it); the refusals and what they left behind were"]


TALLY = Tally(_add_unrechecked, _unrechecked_notes)


CHECK = Check("bad_input", check_bad_input, draws=(BAD_REQUESTS_FEATURE.use(),),
              machine=frozenset({"bad request"}), tally=TALLY,
              rejudges=(PARITY, BUDGET_FINISH))
