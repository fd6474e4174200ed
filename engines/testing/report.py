"""Failure reports: the property's sentence, then a runnable script that replays the shrunk
counterexample against the user's factory; for a leak across workloads, the engine history
it needs (found and shrunk by engines.testing.leaks), replayed on one engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from engines.testing.context import SuiteContext
from engines.testing.crash import EngineCrashed
from engines.testing.judging import Violation
from engines.testing.leaks import minimal_leak
from engines.testing.replays import REPLAYS, REPLAYS_SLOW, confirmation, shrinking
from engines.testing.rerun_script import ScriptSetup, rerun_script
from engines.testing.trim import keep_requests_that_matter, shrunk
from engines.testing.verdict import Failure, Leak, failure_after
from engines.testing.workload import Workload, factory_source

__all__ = ["crash_finding", "explain", "explain_leak", "script_setup"]


def _size(w: Workload, steps: int) -> str:
    return (f"{len(w.requests)} request(s), {len(w.bad)} bad, {len(w.aborts)} abort(s), "
            f"{steps} step(s)")


def script_setup(ctx: SuiteContext, variant: str | None = None) -> ScriptSetup:
    """What a script must rebuild to judge as the suite did: the reference engine, the config
    variants (the one that failed, where one did; else all, for the checks that read them),
    the parity options the suite was given (the script chooses from them as the suite did:
    the mode and tolerance in force alone, passed as explicit options, choose otherwise, e.g.
    each side's part of a logprob value's tolerance), torch's threads."""
    options = ctx.options
    names = ([variant] if variant is not None and variant in options.variants
             else list(options.variants))
    setting, tolerance = ctx.asked
    return ScriptSetup(
        ctx.repro_source,
        (factory_source(options.reference, options.reference_spec)
         if options.reference is not None else None),
        {n: factory_source(options.variants[n], None) for n in names},
        None if setting == "auto" else setting, tolerance, ctx.step_timeout,
        options.independent,
        (factory_source(options.independent_factory, options.independent)
         if options.independent_factory is not None else None),
        options.torch_threads)


def explain(ctx: SuiteContext, failure: Failure, w: Workload, *,
            shrink: bool = False) -> Violation:
    """The failure's message plus the counterexample as a runnable script that judges it.
    In the final report (not while Hypothesis shrinks), w is first shrunk where `shrink`
    asks (the state machine's, which Hypothesis does not shrink), then the requests that do
    not matter are dropped (engines.testing.trim)."""
    error = failure.error
    if isinstance(error, EngineCrashed) and error.replay is not None:
        return crash_finding(error)  # not in w's run (the oracle's): replay what crashed
    kept = ""
    # Not for a check the engine declares broken: its strict xfail reads no report, and each
    # try builds an engine (seconds for a library's).
    if not shrinking() and getattr(error, "prop", None) not in ctx.judge.declared:
        if shrink:
            w, failure = shrunk(ctx, w, failure)
        trimmed = keep_requests_that_matter(ctx, w, failure)
        w, failure, kept = trimmed.workload, trimmed.failure, f"{trimmed.sentence()} "
        error = failure.error
    check = getattr(error, "prop", "engine")
    variant = getattr(error, "variant", None)
    on = (f", on the main engine and on variant {variant!r},"
          if variant is not None and variant in ctx.options.variants else "")
    script = rerun_script(check, w, script_setup(ctx, variant))
    # Whether the script reproduces on fresh engines, before the script (which ends the
    # report, so that it can be cut from there): "" while Hypothesis shrinks (that report
    # is thrown away).
    sentence = confirmation(ctx, w, error)
    said = f"{sentence}\n\n" if sentence else ""
    size = f"{kept}Counterexample ({_size(w, failure.steps)})"
    if isinstance(error, EngineCrashed):
        intro = f"{said}{size}, which {error.raises}, as a runnable script"
        found = Violation(check, error.report(script, intro))
    else:
        found = Violation(check, f"{error}\n\n{said}{size}{on} as a runnable script:\n\n"
                                 f"{script}\n")
    found.variant = variant
    return found


def crash_finding(crash: EngineCrashed | Violation) -> Violation:
    """A finding as the pytest run shows it: the finding alone (sentence, for a crash the
    engine's frames, then the script). For a crash that surfaced outside a judged run (the
    oracle's, as workloads were drawn) that makes it a finding like any other; for one
    Hypothesis found (the state machine's findings, crashes or not), it drops Hypothesis'
    notes (its listing of the example repeats the script at length, each drawn request a
    30-line dataclass) except the @reproduce_failure line that a profile with print_blob asks
    for."""
    finding = Violation(getattr(crash, "prop", EngineCrashed.prop), str(crash))
    finding.variant = getattr(crash, "variant", None)
    for note in getattr(crash, "__notes__", ()):
        if "@reproduce_failure" in note:
            finding.add_note(note)
    return finding


def _unseeded(workloads: Sequence[Workload]) -> int:
    """Sampled requests without a seed: what they draw differs run to run, so a failure that
    needs them may be chance, not the engine's history."""
    return sum(1 for w in workloads for r in w.requests
               if r.params.temperature > 0 and r.params.seed is None)


def _seeded(w: Workload, base: int) -> Workload:
    """w with every unseeded sampled request given a seed of its own (ids kept)."""
    reqs = tuple(dataclasses.replace(r, params=dataclasses.replace(r.params, seed=base + i))
                 if r.params.temperature > 0 and r.params.seed is None else r
                 for i, r in enumerate(w.requests))
    return dataclasses.replace(w, requests=reqs)


def _replays(ctx: SuiteContext, earlier: Sequence[Workload], w: Workload, check: str,
             n: int) -> tuple[int, int]:
    """(failed after the history, failed alone), of n replays each on fresh engines."""
    after = sum(failure_after(ctx, earlier, w, check) is not None for _ in range(n))
    alone = sum(failure_after(ctx, [], w, check) is not None for _ in range(n))
    return after, alone


def _diagnosis(ctx: SuiteContext, earlier: list[Workload], w: Workload,
               check: str) -> tuple[str, bool]:
    """The sentence on what the replays showed, from evidence only, and whether it shows a
    leak: one is said only where the history reproduces it and the workload alone does not,
    with no unseeded sampling that chance could explain it by (or, with such requests, where
    the same replays with every one of them seeded still show it)."""
    n = REPLAYS if ctx.pool.cheap else REPLAYS_SLOW
    after, alone = _replays(ctx, earlier, w, check, n)
    counts = (f"Replayed on freshly built engines: after the earlier workload(s) it reproduced "
              f"{after} of {n}; the workload alone, {alone} of {n}.")
    unseeded = _unseeded([*earlier, w])
    if unseeded:
        s_earlier = [_seeded(e, 1000 * (i + 1)) for i, e in enumerate(earlier)]
        s_w = _seeded(w, 1000 * (len(earlier) + 1))
        s_after, s_alone = _replays(ctx, s_earlier, s_w, check, n)
        counts += (f" {unseeded} request(s) sample without a seed, so chance can make or "
                   f"unmake the failure: with each of them seeded, after the earlier "
                   f"workload(s) {s_after} of {n}, alone {s_alone} of {n}.")
        if s_after and not s_alone:
            return counts + " So it needs the engine's history: state leaks across requests.", True
        return counts + (" Not shown to be a leak: chance (the unseeded draws) explains it as "
                         "well as the history does."), False
    if after and not alone:
        return counts + " So it needs the engine's history: state leaks across requests.", True
    if alone:
        return counts + (" It fails without the history too: not a leak, but a failure that "
                         "depends on timing (the search's fresh-engine replay passed)."), False
    return counts + (" Not reproduced: the failure depends on timing or on state the script "
                     "does not control."), False


def explain_leak(ctx: SuiteContext, leak: Leak, w: Workload, check: str) -> Violation:
    """w passed on a fresh engine but failed on one with a history: find the shortest history
    that replays it, then say from replays (never from the failure's shape) whether the
    history is what it needs."""
    # Every try builds an engine: a handful for one that is slow to build.
    cheap = ctx.pool.cheap
    served = len(leak.history)
    earlier, w = minimal_leak(
        leak.history, w, lambda e, c: failure_after(ctx, e, c, check) is not None,
        shrink=cheap, budget=40 if cheap else 4)
    failure = failure_after(ctx, earlier, w, check) or leak.first
    script = rerun_script(check, w, script_setup(ctx), earlier)
    n_earlier = sum(len(e.requests) for e in earlier)
    sentence, _ = _diagnosis(ctx, earlier, w, check)
    dropped = (f" ({len(earlier)} of the {served} it had served before: the failure replays "
               "without the others)" if len(earlier) < served else "")
    return Violation(
        check,
        f"{failure.error}\n\nThis workload passed on a fresh engine but failed on one that had "
        f"served the {len(earlier)} earlier workload(s) in the script below, drained them and "
        f"reported itself idle{dropped}. {sentence} "
        f"Counterexample ({len(earlier)} earlier workload(s) of {n_earlier} request(s), then "
        f"{len(w.requests)} request(s)) as a runnable script:\n\n{script}\n",
    )
