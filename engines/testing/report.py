"""Failure reports: the property's sentence, then a runnable script that replays the shrunk
counterexample against the user's factory; for a leak across workloads, the engine history
it needs (found and shrunk by engines.testing.leaks), replayed on one engine."""

from __future__ import annotations

from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed
from engines.testing.judging import Violation
from engines.testing.leaks import minimal_leak
from engines.testing.replays import confirmation, variant_script
from engines.testing.verdict import Failure, Leak, failure_after
from engines.testing.workload import Workload, repro_sequence, repro_snippet

__all__ = ["crash_finding", "explain", "explain_leak"]


def _size(w: Workload, steps: int) -> str:
    return (f"{len(w.requests)} request(s), {len(w.bad)} bad, {len(w.aborts)} abort(s), "
            f"{steps} step(s)")


def explain(ctx: SuiteContext, failure: Failure, w: Workload) -> Violation:
    """The failure's message plus the counterexample as a runnable script."""
    error = failure.error
    if isinstance(error, EngineCrashed) and error.replay is not None:
        return crash_finding(error)  # not in w's run (the oracle's): replay what crashed
    check = getattr(error, "prop", "engine")
    variant = getattr(error, "variant", None)
    if variant is not None and variant in ctx.options.variants:
        # Found on a config variant: the script runs that variant beside the main engine.
        snippet = variant_script(ctx, w, variant, failure.steps + 1)
        on = f", on the main engine and on variant {variant!r},"
    else:
        snippet, on = repro_snippet(w, ctx.repro_source, failure.steps + 1), ""
    # Whether the script reproduces on fresh engines, before the script (which ends the
    # report, so that it can be cut from there): "" while Hypothesis shrinks (that report
    # is thrown away).
    sentence = confirmation(ctx, w, error)
    said = f"{sentence}\n\n" if sentence else ""
    if isinstance(error, EngineCrashed):
        intro = (f"{said}Counterexample ({_size(w, failure.steps)}), which {error.raises}, "
                 "as a runnable script")
        found = Violation(check, error.report(snippet, intro))
    else:
        found = Violation(check, f"{error}\n\n{said}Counterexample ({_size(w, failure.steps)})"
                                 f"{on} as a runnable script:\n\n{snippet}\n")
    found.variant = variant
    return found


def crash_finding(crash: EngineCrashed | Violation) -> Violation:
    """A crash as the pytest run shows it: the finding alone (sentence, engine's frames,
    script). For one that surfaced outside a judged run (the oracle's, as workloads were
    drawn) that makes it a finding like any other; for one Hypothesis found, it drops
    Hypothesis' notes (its listing of the example repeats the script at length) except the
    @reproduce_failure line that a profile with print_blob asks for."""
    finding = Violation(EngineCrashed.prop, str(crash))
    for note in getattr(crash, "__notes__", ()):
        if "@reproduce_failure" in note:
            finding.add_note(note)
    return finding


def explain_leak(ctx: SuiteContext, leak: Leak, w: Workload, check: str) -> Violation:
    """w passes on a fresh engine but failed on one with a history: replay the history."""
    # Every try builds an engine: a handful for one that is slow to build.
    cheap = ctx.pool.cheap
    earlier, w = minimal_leak(
        leak.history, w, lambda e, c: failure_after(ctx, e, c, check) is not None,
        shrink=cheap, budget=40 if cheap else 4)
    failure = failure_after(ctx, earlier, w, check) or leak.first
    script = repro_sequence(earlier, w, ctx.repro_source, w.step_bound())
    n_earlier = sum(len(e.requests) for e in earlier)
    return Violation(
        check,
        f"{failure.error}\n\nThis workload passes on a fresh engine but fails on one that has "
        f"served the {len(earlier)} earlier workload(s) in the script below, drained them and "
        "reported itself idle: state leaks across requests. Counterexample "
        f"({len(earlier)} earlier workload(s) of {n_earlier} request(s), then "
        f"{len(w.requests)} request(s)) as a runnable script:\n\n{script}\n",
    )
