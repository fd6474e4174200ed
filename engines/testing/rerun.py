"""What a report's script calls: replay one workload on a freshly built engine and judge it by
the check that failed, the way the suite did; exit 1 while the bug is there.

A script that only printed outputs left the reader to compare them by eye. This one judges:
on a violation it prints the check's sentence and, for each request the sentence names, the
tokens expected (the request served alone on a fresh engine, and on the reference engine
where there is one) against those observed, then exits 1; once the bug is fixed it prints
"passes: <check>" and exits 0. A crash (check "crash") prints what was expected (the
workload served to the end) against what happened, with the engine's frames, and exits 1.
`python script.py --steps` also prints every step's outputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engines.protocol import Engine, Request
from engines.testing.checks import check_named
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.crash import EngineCrashed
from engines.testing.oracle import AloneOracle
from engines.testing.precision import ParitySetting
from engines.testing.recorder import Trace, run_workload
from engines.testing.workload import Workload, render_outputs

__all__ = ["CRASH", "Verdict", "judge", "main", "script_context"]

CRASH = "crash"  # the check name of a crash: no property, the run itself must not raise
Factory = Callable[[], Engine]


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    text: str  # what the script prints: "passes: ..." or the finding


def _named(w: Workload, text: str) -> list[Request]:
    """The workload's requests whose display id the finding names."""
    return [r for r in w.requests if repr(r.request_id) in text]


def _observed(trace: Trace, r: Request) -> str:
    outs = trace.outputs.get(r.request_id, [])
    if r.params.n > 1:
        kids: dict[int, list[int]] = {}
        ends: dict[int, str] = {}
        for _, out in outs:
            kids.setdefault(out.index, []).extend(out.token_ids)
            if out.finish_reason is not None:
                ends.setdefault(out.index, f" {out.finish_reason.value}")
        return ", ".join(f"child {i}: {kids[i]}{ends.get(i, '')}"
                         for i in sorted(kids)) or "no output"
    reason = trace.finish_reason(r.request_id)
    return f"{trace.tokens(r.request_id)} ({getattr(reason, 'value', reason)})"


def _alone(oracle: AloneOracle, r: Request) -> str:
    try:
        got = oracle(r.prompt_token_ids, r.params)
    except EngineCrashed as crash:
        return f"crashed: {crash.sentence}"
    except Exception as exc:  # NotServable and the like: say so, the verdict stands
        return f"not served ({type(exc).__name__}: {exc})"
    if got.children is not None:
        return ", ".join(f"child {i}: {list(c)}" for i, c in enumerate(got.children))
    return f"{list(got.tokens)} ({getattr(got.finish_reason, 'value', got.finish_reason)})"


def _expected_observed(ctx: SuiteContext, trace: Trace, text: str) -> str:
    """Per request the finding names: observed tokens against the same request alone.
    Sampled requests without a seed have no expected tokens (chance draws them)."""
    lines = []
    for r in _named(trace.workload, text):
        lines.append(f"request {r.request_id!r}:")
        if r.request_id in trace.aborted_at:
            lines.append(f"  (aborted before step {trace.aborted_at[r.request_id]}: its "
                         "tokens are a prefix of those alone)")
        if r.params.temperature == 0 or r.params.seed is not None:
            lines.append(f"  expected (alone, fresh engine): {_alone(ctx.oracle, r)}")
            if ctx.judge.reference is not None:
                lines.append(f"  expected (alone, reference):    "
                             f"{_alone(ctx.judge.reference, r)}")
        lines.append(f"  observed (this workload):       {_observed(trace, r)}")
    return "\n".join(lines)


def _steps(trace: Trace) -> str:
    return "\n".join(f"step {s.index}: {render_outputs(s.outputs)}"
                     + (f"\n  slots {list(s.table)}" if s.table is not None else "")
                     for s in trace.steps)


def judge(ctx: SuiteContext, check: str, w: Workload, earlier: Sequence[Workload] = (), *,
          steps: bool = False) -> Verdict:
    """Serve `earlier` (each drained) then w on one freshly built engine, and judge w's run
    by `check` (CRASH: only that it runs to the end)."""
    engine = ctx.pool.fresh()
    shown = ""
    try:
        for i, e in enumerate(earlier, 1):
            try:
                run_workload(engine, e, deadline=ctx.step_timeout)
            except EngineCrashed as crash:
                return Verdict(False, f"{crash}\n\n(while serving earlier workload {i} of "
                                      f"{len(earlier)}: not the failure the report showed)")
        try:
            trace = run_workload(engine, w, deadline=ctx.step_timeout)
        except EngineCrashed as crash:
            # The engine's exception last, as Python itself would print it.
            return Verdict(False, f"expected: the workload served to the end\nobserved: it "
                                  f"{crash.raises}\n\n{crash}")
        shown = f"{_steps(trace)}\n\n" if steps else ""
        if check == CRASH:
            return Verdict(True, f"{shown}passes: {CRASH} (the workload ran to the end "
                                 "without an exception)")
        try:
            check_named(check)(trace, ctx.judge)
        except AssertionError as found:
            table = _expected_observed(ctx, trace, str(found))
            return Verdict(False, f"{shown}{found}" + (f"\n\n{table}" if table else ""))
    finally:
        ctx.pool.release(engine, ok=False)
    return Verdict(True, f"{shown}passes: {check}")


def script_context(make_engine: Factory, *, reference: Factory | None = None,
                   variants: Mapping[str, Factory] | None = None,
                   parity: ParitySetting = "auto", tolerance: float | None = None,
                   step_timeout: float | None = 60.0, independent: Factory | str = "auto",
                   torch_threads: int | None = None) -> SuiteContext:
    """The context a script judges in, built from the options the suite was given (its
    `parity` and `tolerance` as asked, not the choice made from them), as the suite built its
    own. `independent`: as --independent-reference, "auto", "off" or the factory itself."""
    named = None if isinstance(independent, str) else independent
    options = SuiteOptions(parity=parity, tolerance=tolerance, step_timeout=step_timeout,
                           reference=reference, variants=dict(variants or {}),
                           independent=(independent if isinstance(independent, str) else
                                        getattr(independent, "__name__", "make_independent")),
                           independent_factory=named, torch_threads=torch_threads)
    return build_context(make_engine, name=getattr(make_engine, "__name__", "engine"),
                         options=options)


def main(check: str, workload: Workload, make_engine: Factory, *,
         earlier: Sequence[Workload] = (), reference: Factory | None = None,
         variants: Mapping[str, Factory] | None = None, parity: ParitySetting = "auto",
         tolerance: float | None = None, step_timeout: float | None = 60.0,
         independent: Factory | str = "auto", torch_threads: int | None = None,
         argv: Sequence[str] | None = None) -> None:
    """A report's script: judge the replay, print the verdict, and exit 0 if it passes,
    1 if it fails (SystemExit). `--steps` in argv prints every step's outputs too. The
    options are script_context's."""
    args = sys.argv[1:] if argv is None else list(argv)
    ctx = script_context(make_engine, reference=reference, variants=variants, parity=parity,
                         tolerance=tolerance, step_timeout=step_timeout,
                         independent=independent, torch_threads=torch_threads)
    try:
        verdict = judge(ctx, check, workload, earlier, steps="--steps" in args)
    finally:
        ctx.close()
    print(verdict.text, file=sys.stdout if verdict.passed else sys.stderr, flush=True)
    raise SystemExit(0 if verdict.passed else 1)
