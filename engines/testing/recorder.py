"""Runs a workload on an engine through the protocol only, recording what it saw as a Trace.

The driver never judges (engines.testing.checks does), except for what it cannot leave
for later: an exception from the engine, or a step that does not return.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import secrets
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from engines.protocol import (
    Abortable,
    Engine,
    Exercised,
    KVIntrospection,
    Load,
    LoadIntrospection,
    LoRAManagement,
    Request,
    SlotIntrospection,
    StepOutput,
    capabilities_of,
    child_key,
    loras,
)
from engines.testing.crash import EngineCrashed, call_engine, step_deadline
from engines.testing.workload import Abort, AdapterSwap, BadRequest, Workload

__all__ = [
    "EngineCrashed", "Recorder", "StepRecord", "Trace", "is_drained", "load_left",
    "run_workload", "step_deadline",  # from engines.testing.crash, where crashes are described
]

_serial = itertools.count()
# Cache salts go to the engine tagged with this process's tag and the run's serial: a salted
# tenant's cache then holds only what this run computed, on any engine, a server that served
# earlier runs (or earlier processes) included, so what a salted request finds cached is
# explained by this run alone (engines.testing.judging.tenant_counts). Requests with
# one salt in a run share it still; no salt stays none.
_PROCESS_TAG = secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class KVSnapshot:
    """What an engine with KVIntrospection reported, request ids in display ids."""

    block_size: int
    total: int
    free: int
    tables: dict[Hashable, tuple[int, ...]]
    cached: dict[Hashable, int]
    extra: int = 0  # blocks a request may hold beyond its cached tokens' (kv_extra_blocks)


@dataclass(slots=True)
class StepRecord:
    index: int
    outputs: list[StepOutput]  # request ids mapped back to display ids
    waiting_before: frozenset[Hashable]  # added, unfinished, not aborted, in no slot
    live_holders_before: frozenset[Hashable]  # slot holders, unfinished and not aborted
    table: tuple[Hashable | None, ...] | None = None  # after the step, display ids
    lengths: tuple[int, ...] | None = None  # after the step
    wasted: int = 0  # wasted_slot_steps delta since the workload started
    table_before: tuple[Hashable | None, ...] | None = None  # the table step() started from
    kv: KVSnapshot | None = None  # after the step


@dataclass
class Trace:
    workload: Workload
    slots: bool  # the engine has SlotIntrospection
    max_batch_size: int | None
    vocab_size: int = 0  # the engine's, for the token range
    tokenizer: str | None = None  # the engine's declared one (Capabilities.tokenizer)
    steps: list[StepRecord] = field(default_factory=list)
    outputs: dict[Hashable, list[tuple[int, StepOutput]]] = field(default_factory=dict)
    stray: list[tuple[int, StepOutput]] = field(default_factory=list)  # unknown/bad ids
    refusals: list[BaseException | None] = field(default_factory=list)  # per bad request
    has_work_errors: list[tuple[int, str]] = field(default_factory=list)
    bad_side_effects: list[tuple[int, str]] = field(default_factory=list)
    aborted_at: dict[Hashable, int] = field(default_factory=dict)
    finished_at: dict[Hashable, int] = field(default_factory=dict)  # first finishing output
    stalled: bool = False
    kv_after_drain: KVSnapshot | None = None  # once has_work() said False
    # LoadIntrospection: the engine's own count before the workload, and once has_work() said
    # False (after waiting up to its load_settle_s for the count to come to rest).
    load_before: Load | None = None
    load_after_drain: Load | None = None
    load_waited_s: float = 0.0
    exercised: dict[str, int] = field(default_factory=dict)  # engine counters' change
    # The directory of each request's LoRA adapter as the engine declared it when the request
    # was added (engines.protocol.loras): oracles serve the same weights by it.
    lora_paths: dict[Hashable, str] = field(default_factory=dict)
    # The engine declares StepOutput.cached_prompt_tokens (Capabilities.output_fields).
    cached_counts: bool = False

    def tokens(self, rid: Hashable) -> list[int]:
        return [t for _, out in self.outputs.get(rid, []) for t in out.token_ids]

    def finish_reason(self, rid: Hashable) -> object:
        finals = [out.finish_reason for _, out in self.outputs.get(rid, []) if out.finished]
        return finals[0] if finals else None


IN_FLIGHT = 8  # requests a crash report describes one by one


class Recorder:
    """Talks to one engine through the protocol, in display ids, recording a Trace.

    run_workload replays a Workload with it; the stateful machine drives it rule by rule.
    """

    def __init__(self, engine: Engine, *, deadline: float | None = 60.0) -> None:
        self.engine = engine
        self.deadline = deadline
        self.slots = isinstance(engine, SlotIntrospection)
        self.kv = isinstance(engine, KVIntrospection)
        self.load = isinstance(engine, LoadIntrospection)
        size = int(engine.max_batch_size) if self.slots else None  # type: ignore[attr-defined]
        self.trace = Trace(Workload((), ()), self.slots, size, int(engine.vocab_size))
        declared = capabilities_of(engine)
        self.trace.tokenizer = declared.tokenizer
        self.trace.cached_counts = "cached_prompt_tokens" in declared.output_fields
        self.serial = next(_serial)
        self.rt: dict[Hashable, Hashable] = {}  # display id -> runtime id
        self.to_display: dict[Hashable, Hashable] = {}
        self.requests: list[Request] = []
        self.arrivals: list[int] = []
        self.aborts: list[Abort] = []
        self.bad: list[BadRequest] = []
        self.finished: set[Hashable] = set()
        self.children: dict[Hashable, int] = {}  # display id -> params.n, where above 1
        self.children_done: dict[Hashable, set[int]] = {}  # the children finished so far
        self.wasted0 = int(engine.wasted_slot_steps) if self.slots else 0  # type: ignore[attr-defined]
        self.holders: frozenset[Hashable] = frozenset()
        self.k = 0  # index of the next step() call
        self.counters0 = self._counters()
        if self.load:
            self.trace.load_before = self.call("load()", engine.load)  # type: ignore[attr-defined]

    def _counters(self) -> dict[str, int]:
        if not isinstance(self.engine, Exercised):
            return {}
        engine = self.engine
        return {str(k): int(v) for k, v in dict(self.call("exercised()",
                                                            engine.exercised)).items()}

    def call(self, what: str, fn: Callable[[], object]) -> Any:
        """One protocol call; fn is the engine's own bound method (or a partial of one), so
        that every frame below the call is the engine's and a crash report shows only those."""
        return call_engine(what, self.k, fn, self.deadline, self.in_flight)

    def in_flight(self) -> str:
        """The requests added and unfinished, for a crash report: what each had got so far."""
        live = [r for r in self.requests if r.request_id not in self.finished]
        if not live:
            return "no request"
        parts = []
        for r in live[:IN_FLIGHT]:
            rid = r.request_id
            state = self._tokens_out(r)
            if r.params.temperature > 0:
                state += f", temperature {r.params.temperature}" + (
                    f" seed {r.params.seed}" if r.params.seed is not None else "")
            if rid in self.trace.aborted_at:
                state += ", aborted"
            elif self.slots and rid not in self.holders:
                state += ", waiting"
            n = len(r.prompt_token_ids)
            parts.append(f"{rid!r} (prompt of {n} token{'s' * (n != 1)}, {state})")
        if len(live) > IN_FLIGHT:
            parts.append(f"and {len(live) - IN_FLIGHT} more")
        return ", ".join(parts)

    def _tokens_out(self, r: Request) -> str:
        """What a request has got so far against its budget: a family's (n > 1, or a beam
        search's returned beams) child by child, since each child has a budget of its own."""
        rid, budget = r.request_id, r.params.max_tokens
        n = self.children.get(rid, 1)
        if n <= 1:
            return f"{len(self.trace.tokens(rid))} of max_tokens {budget} out"
        got = [0] * n
        for _, out in self.trace.outputs.get(rid, []):
            if 0 <= out.index < n:
                got[out.index] += len(out.token_ids)
        done = self.children_done.get(rid, set())
        each = ", ".join(f"child {i} {c}" + (" finished" * (i in done))
                         for i, c in enumerate(got))
        return f"n {n}, each of max_tokens {budget}: {each} out"

    @property
    def unfinished(self) -> set[Hashable]:
        return {r.request_id for r in self.requests} - self.finished

    def workload(self) -> Workload:
        w = Workload(tuple(self.requests), tuple(self.arrivals), tuple(self.aborts),
                     tuple(self.bad))
        self.trace.workload = w
        return w

    def add(self, r: Request) -> None:
        runtime = f"{r.request_id}#{self.serial}"
        if isinstance(r.params.n, int) and r.params.n > 1:
            self.children[r.request_id] = r.params.n
        self.rt[r.request_id] = runtime
        self.to_display[runtime] = r.request_id
        req = dataclasses.replace(r, request_id=runtime, cache_salt=self.salt(r.cache_salt))
        if r.lora is not None:
            path = loras(self.engine).get(r.lora)
            if path is not None:
                self.trace.lora_paths[r.request_id] = path
        try:
            self.call(f"add_request({r.request_id!r})",
                      functools.partial(self.engine.add_request, req))
        finally:  # even if it crashed: the workload so far replays the crash
            self.requests.append(r)
            self.arrivals.append(self.k)

    def salt(self, salt: str | None) -> str | None:
        """The cache salt the engine is sent: this run's own (see _PROCESS_TAG)."""
        return None if salt is None else f"{salt}#{_PROCESS_TAG}-{self.serial}"

    def add_bad(self, b: BadRequest) -> None:
        b = dataclasses.replace(b, step=self.k)
        if b.duplicate_of is not None:
            bad_id = self.rt[b.duplicate_of]
        else:
            bad_id = f"{b.request.request_id}#{self.serial}"
        bad = dataclasses.replace(b.request, request_id=bad_id)
        # Compared before and after: an engine may rightly report work for a step after its
        # last request finished (retire-at-start), which is no side effect of the refusal.
        busy = self.call("has_work()", self.engine.has_work)
        try:
            with step_deadline(self.deadline):
                self.engine.add_request(bad)
            self.trace.refusals.append(None)
        except Exception as exc:  # judged by the bad-input property
            self.trace.refusals.append(exc)
        self.bad.append(b)
        if not busy and self.call("has_work()", self.engine.has_work):
            self.trace.bad_side_effects.append(
                (self.k, f"has_work() turned True when a bad request ({b.kind}) was refused "
                 "on an idle engine")
            )

    def abort(self, rid: Hashable) -> None:
        if not isinstance(self.engine, Abortable):
            return
        try:
            self.call(f"abort_request({rid!r})",
                      functools.partial(self.engine.abort_request, self.rt[rid]))
        finally:
            self.aborts.append(Abort(self.k, rid))
        if rid in self.unfinished:
            self.trace.aborted_at.setdefault(rid, self.k)

    def swap(self, swap: AdapterSwap, restore: dict[str, str]) -> None:
        """Re-add adapter `swap.name` with the directory `swap.like` is served from; its own
        directory goes into `restore` (the first time), for put_back."""
        engine = self.engine
        served = loras(engine)
        if not isinstance(engine, LoRAManagement) or not {swap.name, swap.like} <= served.keys():
            raise ValueError(f"swaps: {swap} needs an engine with add_lora/remove_lora that "
                             f"serves both adapters; it serves {sorted(served)}")
        restore.setdefault(swap.name, served[swap.name])
        self.call(f"remove_lora({swap.name!r})", functools.partial(engine.remove_lora, swap.name))
        self.call(f"add_lora({swap.name!r}, {served[swap.like]!r})",
                  functools.partial(engine.add_lora, swap.name, served[swap.like]))

    def put_back(self, restore: dict[str, str]) -> None:
        """Each swapped adapter re-added from its own directory, once nothing runs."""
        engine: Any = self.engine
        for name, path in restore.items():
            if loras(engine).get(name) != path:
                self.call(f"remove_lora({name!r})", functools.partial(engine.remove_lora, name))
                self.call(f"add_lora({name!r}, {path!r})",
                          functools.partial(engine.add_lora, name, path))

    def step(self) -> StepRecord:
        trace, k = self.trace, self.k
        pending = self.unfinished
        if pending and not self.call("has_work()", self.engine.has_work):
            trace.has_work_errors.append(
                (k, f"has_work() is False while {sorted(map(str, pending))} are unfinished")
            )
        live = pending - trace.aborted_at.keys()
        record = StepRecord(k, [], frozenset(live - self.holders), frozenset(live & self.holders))
        if self.slots:
            record.table_before = self._table()
        for out in self.call("step()", self.engine.step):
            disp = self.to_display.get(out.request_id)
            if disp is None:
                trace.stray.append((k, out))
                continue
            out = dataclasses.replace(out, request_id=disp)
            record.outputs.append(out)
            trace.outputs.setdefault(disp, []).append((k, out))
            if out.finished and disp not in self.finished:
                # n > 1: finished once every child has its finishing output.
                done = self.children_done.setdefault(disp, set())
                done.add(out.index)
                if len(done) >= self.children.get(disp, 1):
                    self.finished.add(disp)
                    trace.finished_at[disp] = k
        if self.slots:
            eng: Any = self.engine
            record.table = self._table()
            record.lengths = tuple(int(n) for n in self.call("slot_lengths()", eng.slot_lengths))
            record.wasted = int(eng.wasted_slot_steps) - self.wasted0
            self.holders = frozenset(x for x in record.table if x is not None)
        if self.kv:
            record.kv = self.kv_snapshot()
        trace.steps.append(record)
        self.k += 1
        return record

    def _table(self) -> tuple[Hashable | None, ...]:
        table = self.call("slot_table()", self.engine.slot_table)  # type: ignore[attr-defined]
        return tuple(None if x is None else self.to_display.get(x, x) for x in table)

    def kv_snapshot(self) -> KVSnapshot:
        eng: Any = self.engine
        tables = self.call("kv_block_tables()", eng.kv_block_tables)
        cached = self.call("kv_cached_tokens()", eng.kv_cached_tokens)
        return KVSnapshot(
            block_size=int(eng.kv_block_size),
            total=int(eng.kv_total_blocks),
            free=int(self.call("kv_free_blocks()", eng.kv_free_blocks)),
            tables={self._kv_display(r): tuple(int(b) for b in t)
                    for r, t in dict(tables).items()},
            cached={self._kv_display(r): int(n) for r, n in dict(cached).items()},
            extra=capabilities_of(eng).kv_extra_blocks,
        )

    def _kv_display(self, key: Hashable) -> Hashable:
        """A KV table's key in display ids: a request's, or a child's (child_key)."""
        if key in self.to_display:
            return self.to_display[key]
        if isinstance(key, tuple) and len(key) == 2 and key[0] in self.to_display \
                and child_key(key[0], key[1]) == key:
            return child_key(self.to_display[key[0]], key[1])
        return key

    def _load_at_rest(self) -> None:
        """Poll the engine's own load until it reports nothing left (load_left), or until
        its load_settle_s passed: a server's count lags its streams. The last report is
        recorded; the drain check judges it."""
        eng: Any = self.engine
        before = self.trace.load_before
        settle = capabilities_of(eng).load_settle_s
        start = time.monotonic()
        while True:
            now = self.call("load()", eng.load)
            waited = time.monotonic() - start
            if before is None or load_left(before, now) is None or waited >= settle:
                break
            time.sleep(min(0.05, max(settle - waited, 0.0)))
        self.trace.load_after_drain, self.trace.load_waited_s = now, waited

    def drain(self, bound: int) -> Trace:
        """Step until every request finished (or the bound), then watch the engine settle."""
        while self.unfinished:
            if self.k >= bound:
                self.trace.stalled = True
                self.workload()
                return self.trace
            self.step()
        # Retire-at-start engines may report work for a step after the last finish.
        for _ in range(2):
            if not self.call("has_work()", self.engine.has_work):
                break
            self.step()
        else:
            if self.call("has_work()", self.engine.has_work):
                self.trace.has_work_errors.append(
                    (self.k, "has_work() is still True two steps after every request finished")
                )
        # One idle step shows whether a slot is still held (leaked) with nothing in flight.
        last = self.trace.steps[-1].table if self.trace.steps else None
        if self.slots and (last is None or any(x is not None for x in last)):
            self.step()
        if (self.kv or self.load) and not self.call("has_work()", self.engine.has_work):
            if self.kv:
                self.trace.kv_after_drain = self.kv_snapshot()
            if self.load:
                self._load_at_rest()
        after = self._counters()
        self.trace.exercised = {k: v - self.counters0.get(k, 0) for k, v in after.items()}
        self.workload()
        return self.trace


def run_workload(engine: Engine, w: Workload, *, deadline: float | None = 60.0) -> Trace:
    """Serve w on engine: at step k, re-add k's swapped adapters, add k's arrivals and bad
    requests, issue k's aborts, then call step(); swapped adapters are put back after the
    drain. Stops when every request has finished, or at w.step_bound()."""
    rec = Recorder(engine, deadline=deadline)
    bound = w.step_bound()
    restore: dict[str, str] = {}  # adapters re-added with other weights: their own directory
    while rec.k <= w.last_event_step:
        k = rec.k
        for swap in w.swaps:
            if swap.step == k:
                rec.swap(swap, restore)
        for r, s in zip(w.requests, w.arrivals, strict=True):
            if s == k:
                rec.add(r)
        for b in w.bad:
            if b.step == k:
                rec.add_bad(b)
        for a in w.aborts:
            if a.step == k:
                rec.abort(a.request_id)
        rec.step()
    trace = rec.drain(bound)
    if restore and not trace.stalled:
        rec.put_back(restore)
    trace.workload = w  # the original, with its label and event order
    return trace


# KV use compared with its value before the workload: equal, up to float noise.
KV_USAGE_SLACK = 1e-9


def load_left(before: Load, after: Load) -> str | None:
    """What a drained engine's own load report still shows, compared with before the
    workload (None: nothing): requests running or waiting, or KV use above its earlier value."""
    left = []
    if after.running:
        left.append(f"{after.running} request(s) running")
    if after.waiting:
        left.append(f"{after.waiting} request(s) waiting")
    if (after.kv_usage is not None and before.kv_usage is not None
            and after.kv_usage > before.kv_usage + KV_USAGE_SLACK):
        left.append(f"KV usage {after.kv_usage:.6g}, above its {before.kv_usage:.6g} before "
                    "the workload")
    return "; ".join(left) or None


def is_drained(engine: Engine) -> bool:
    """No request in flight and (with SlotIntrospection) every slot free: safe to reuse."""
    try:
        if engine.has_work():
            return False
        if isinstance(engine, SlotIntrospection):
            return all(x is None for x in engine.slot_table())
        return True
    except Exception:
        return False
