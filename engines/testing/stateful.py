"""A Hypothesis state machine that drives an engine rule by rule: add a request, add a bad
one, abort one, step. Invariants run after every step; the full properties (parity included)
run when the machine drains the engine at teardown.

Third parties run it on their own engine:

    from engines.testing.stateful import engine_machine
    TestMyEngine = engine_machine(make_engine).TestCase

The machine takes a SuiteContext (built from a factory if it is given one): its engines,
oracle and which checks apply all come from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from hypothesis import Phase, note
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engines.protocol import Engine, Request, loras
from engines.testing import progress_lines as progress
from engines.testing.checks import VARIANTS, Check, Moment, catalogue
from engines.testing.context import SuiteContext, build_context
from engines.testing.crash import EngineCrashed
from engines.testing.features.bad_requests import bad_kinds, bad_request
from engines.testing.features.tenants import adapter_swaps, swappable, swaps_note
from engines.testing.judging import Violation
from engines.testing.recorder import Recorder
from engines.testing.report import crash_finding, explain
from engines.testing.search import search_settings
from engines.testing.strategies import prompts, request_mixes
from engines.testing.verdict import Failure
from engines.testing.workload import BadRequest, render_outputs, render_request

__all__ = ["EngineMachine", "engine_machine", "run_engine_machine"]

T = TypeVar("T")


class EngineMachine(RuleBasedStateMachine):
    ctx: SuiteContext  # set by engine_machine()

    def __init__(self) -> None:
        super().__init__()
        progress.example()  # each of Hypothesis' runs (and shrink steps) builds a machine
        # Cheap engines: a fresh one per example, so each run depends on its rules alone.
        pool = self.ctx.pool
        self.engine = pool.fresh() if pool.cheap else pool.acquire()[0]
        self.rec = Recorder(self.engine, deadline=self.ctx.step_timeout)
        self.limits = self.ctx.limits
        # Only the checks of workloads that run and are not declared broken: a strict xfail
        # is for the check's own test, and the machine must not fail on what the engine
        # admits to.
        self.judged: list[Check] = [
            c for c in catalogue() if c.prop is not None
            and self.ctx.checks.get(c.name) is not None
            and self.ctx.checks[c.name].status == "run"]
        self.n_requests = 0
        self.n_bad = 0
        # Adapters swapped (engines.testing.features.tenants), before which step: no variant is
        # judged after one, and a report names them (its script does not replay them).
        self.swaps: list[tuple[int, str]] = []
        self.ok = False
        self.failed = False  # a rule already failed: teardown must not report a second bug

    def _judge(self, moment: Moment | None, *, partial: bool) -> None:
        """Judge the trace so far by the checks the registry has the machine judge at this
        moment (every one that applies at teardown: moment None)."""
        __tracebackhide__ = True
        trace = self.rec.trace
        self.rec.workload()
        stalled, trace.stalled = trace.stalled, trace.stalled or partial
        failure = None
        try:
            for check in self.judged:
                if self.swaps and VARIANTS in check.needs:
                    continue  # the variants serve the adapters they were built with
                if (moment is None or moment in check.machine) and check.prop is not None:
                    check(trace, self.ctx.judge)
        except AssertionError as exc:
            if self.swaps and isinstance(exc, Violation):
                exc = Violation(exc.prop, f"{exc}\n\n{swaps_note(self.swaps)}")
            failure = explain(self.ctx, Failure(exc, len(trace.steps)), trace.workload,
                              shrink=True)
        finally:
            trace.stalled = stalled
        if failure is not None:
            self.failed = True
            progress.failure()
            # One raise site, no exception context: Hypothesis sees one bug and shrinks it.
            raise failure

    def _engine(self, action: Callable[[], T]) -> T:
        """action(), where an exception from the engine (in the machine's run, or in the
        oracle's while a request is drawn) becomes a finding with its runnable script."""
        __tracebackhide__ = True
        finding: Violation
        try:
            return action()
        except EngineCrashed as crash:
            if crash.replay is not None:  # the oracle's: its script is the request alone
                finding = crash_finding(crash)
            else:  # the machine's: the rules so far, as a workload, replay it
                steps = self.rec.k + 1 if crash.step is None else crash.step + 1
                finding = explain(self.ctx, Failure(crash, steps), self.rec.workload(),
                                  shrink=True)
        self.failed = True
        progress.failure()
        # One raise site, no exception context: Hypothesis sees one bug and shrinks it.
        raise finding

    @rule(data=st.data())
    def add_request(self, data: st.DataObject) -> None:
        # Near misses are drawn of the prompts added so far (running, or finished and cached).
        earlier = tuple(r.prompt_token_ids for r in self.rec.requests)
        (req,) = self._engine(lambda: data.draw(request_mixes(
            self.limits, alone=self.ctx.oracle.tokens, min_size=1, max_size=1,
            earlier=earlier), label="request"))
        req = dataclasses.replace(req, request_id=f"r{self.n_requests}")  # tenant kept
        self.n_requests += 1
        note(f"before step {self.rec.k}: add {render_request(req)}")
        self._engine(lambda: self.rec.add(req))

    @rule(data=st.data())
    def add_bad_request(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(bad_kinds(self.limits)), label="bad_kind")
        prompt = data.draw(prompts(self.limits, max_len=4), label="bad_prompt")
        rid = f"bad{self.n_bad}"
        self.n_bad += 1
        live = sorted(self.rec.unfinished, key=str)
        if kind == "duplicate id":
            if not live:
                return
            target = data.draw(st.sampled_from(live), label="duplicates")
            bad = BadRequest(self.rec.k, kind, Request((*prompt, 0), request_id=rid),
                             duplicate_of=target)
        else:
            bad = BadRequest(self.rec.k, kind, bad_request(self.limits, kind, prompt, rid))
        note(f"before step {self.rec.k}: add bad request ({kind})")
        self._engine(lambda: self.rec.add_bad(bad))
        self._judge("bad request", partial=True)

    @precondition(lambda self: self.limits.abortable and bool(self.rec.requests))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        ids = [r.request_id for r in self.rec.requests]
        rid = data.draw(st.sampled_from(ids), label="abort")
        note(f"before step {self.rec.k}: abort {rid}")
        self._engine(lambda: self.rec.abort(rid))

    @precondition(lambda self: swappable(self.engine, self.limits))
    @rule(data=st.data())
    def swap_adapter(self, data: st.DataObject) -> None:
        """Remove an idle adapter, add another directory under a new name (or the same name
        again), and add a request under it: it must get that adapter's tokens."""
        in_use = {r.lora for r in self.rec.requests if r.request_id in self.rec.unfinished}
        swap = data.draw(adapter_swaps(self.engine, in_use), label="swap")
        if swap is None:
            return
        note(f"before step {self.rec.k}: {swap}")
        self._engine(lambda: swap.apply(self.engine))
        self.swaps.append((self.rec.k, str(swap)))
        self.limits = dataclasses.replace(self.limits, loras=tuple(sorted(loras(self.engine))))
        (req,) = self._engine(lambda: data.draw(request_mixes(
            self.limits, alone=self.ctx.oracle.tokens, min_size=1, max_size=1),
            label="request"))
        req = dataclasses.replace(req, request_id=f"r{self.n_requests}", lora=swap.added)
        self.n_requests += 1
        note(f"before step {self.rec.k}: add {render_request(req)}")
        self._engine(lambda: self.rec.add(req))

    @rule()
    def step(self) -> None:
        progress.tick()
        record = self._engine(self.rec.step)
        note(f"step {record.index}: {render_outputs(record.outputs)}")
        self._judge("step", partial=True)

    @invariant()
    def has_work_tells_the_truth(self) -> None:
        __tracebackhide__ = True
        if self.rec.trace.has_work_errors:
            self._judge("has_work lied", partial=False)

    def teardown(self) -> None:
        if self.failed:
            self.ctx.pool.release(self.engine, ok=False)
            return
        try:
            w = self.rec.workload()
            self._engine(lambda: self.rec.drain(self.rec.k + w.step_bound()))
            self._judge(None, partial=False)
            self.ok = True
        finally:
            # An engine serving other adapters than its factory's is not reused.
            self.ctx.pool.release(self.engine, ok=self.ok and not self.swaps)


def engine_machine(ctx_or_factory: SuiteContext | Callable[[], Engine]) -> type[EngineMachine]:
    """A state machine class bound to one engine factory (or a built SuiteContext)."""
    if isinstance(ctx_or_factory, SuiteContext):
        ctx = ctx_or_factory
    else:
        ctx = build_context(ctx_or_factory, name=getattr(ctx_or_factory, "__name__", "engine"))
    return type("EngineMachine", (EngineMachine,), {"ctx": ctx})


def run_engine_machine(ctx: SuiteContext, *, settings: Settings | None = None) -> None:
    """Run the machine as a test under the current Hypothesis profile (or `settings`), less
    Hypothesis' shrink phase: a failure's report shrinks the machine's workload itself
    (engines.testing.report.explain, shrink=True), each try one run on a fresh engine, where
    Hypothesis would replay every rule of every smaller program (issue 51 measured over five
    minutes of it on one planted bug; 60 s, the whole shrink budget, at batching-dev)."""
    __tracebackhide__ = True
    chosen = search_settings(settings)
    chosen = Settings(chosen, phases=[p for p in chosen.phases if p is not Phase.shrink])
    try:
        run_state_machine_as_test(engine_machine(ctx), settings=chosen)
        return
    except Violation as failure:
        # The finding carries the script that replays it: Hypothesis' listing of the rules
        # would repeat it at length (a dataclass dump per drawn request), and its frames are
        # not the engine's.
        finding = crash_finding(failure)
    raise finding
