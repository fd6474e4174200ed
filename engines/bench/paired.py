"""Paired measurement: several engines driven through their traces one step at a time, in turn.

A shared machine's speed drifts (another tenant's burst, CPU steal, thermal limits) on scales
from milliseconds to minutes; measured one after another, whichever engine ran during a slow
spell looks slow, and a capacity ratio swings by 30% between runs. Here each engine keeps its
own EngineClock, which runs only while that engine's step or its driver's bookkeeping runs and
jumps over idle gaps, and the engines alternate step by step: a slow spell lands on all of
them alike, and each engine's timeline is still open-loop (requests join when their arrival
time has passed on it, however busy the engine is). `between` gets a turn after every cycle of
steps, on no engine's clock: the SLO's yardstick (engines.bench.host.gauge) times the
hardware there, so its timings meet the same slow spells as the engines' steps; the noisy-host
kit's gauge (engines.bench.host) turns there too, when it is on (engines.bench.run_context).

Not a server: an engine that streams (engines.bench.streaming: it computes on its own clock and
reports when tokens arrived) keeps computing while a paused EngineClock says no time passes,
and a skipped idle gap is not waited for. Pairing it would distort its open-loop run, so it is
driven alone, on the wall clock, after the others' paired run, with no `between` turns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping

from engines.bench.clocks import TimeSource
from engines.bench.devices import Sync
from engines.bench.replay import Clock, Run, WallClock, drive, gc_paused
from engines.bench.streaming import streams
from engines.bench.traces import ArrivalTrace
from engines.protocol import Engine


class EngineClock:
    """A stopwatch: time passes only between resume() and pause(); sleeping jumps ahead.
    `source` is what it counts: wall time, or CPU time (engines.bench.clocks)."""

    def __init__(self, source: TimeSource = time.perf_counter) -> None:
        self._source = source
        self._base = 0.0
        self._since: float | None = None

    def resume(self) -> None:
        if self._since is None:
            self._since = self._source()

    def pause(self) -> None:
        self._base = self.now()
        self._since = None

    def now(self) -> float:
        if self._since is None:
            return self._base
        # Parenthesised: (base + source) - since rounds, and a clock asleep until t would
        # read a hair before t (a virtual source that stands still never gets past it).
        return self._base + (self._source() - self._since)

    def sleep_until(self, t: float) -> None:
        if t > self.now():
            running = self._since is not None
            self._base, self._since = t, (self._source() if running else None)


def run_paired(
    engines: Mapping[str, Engine],
    traces: Mapping[str, ArrivalTrace],
    *,
    clocks: Mapping[str, Clock] | None = None,
    record_slots: bool = False,
    give_up_wait_s: Mapping[str, float] | None = None,
    id_suffix: str = "",
    sync: Sync | None = None,
    between: Callable[[], None] | None = None,
    time_source: TimeSource | None = None,
) -> dict[str, Run]:
    """Replay traces[name] on engines[name] for every engine at once, one step each in turn.

    clocks: one per engine (default: a fresh EngineClock each); an EngineClock runs only
    during its engine's turn. Tests pass VirtualClocks that their fake engines advance.
    between: called before every cycle (each unfinished engine stepped once).
    time_source: what the default EngineClocks count (wall time unless given).
    """
    alone = {name for name, engine in engines.items() if streams(engine)} if clocks is None \
        else set()
    clocks = clocks or {name: WallClock() if name in alone
                        else EngineClock(time_source or time.perf_counter) for name in engines}
    runs: dict[str, Generator[None, None, Run]] = {
        name: drive(engine, traces[name], name=name, clock=clocks[name],
                    record_slots=record_slots, id_suffix=id_suffix, sync=sync,
                    give_up_wait_s=(give_up_wait_s or {}).get(name))
        for name, engine in engines.items()
    }
    done: dict[str, Run] = {}
    with gc_paused():
        _alternate({n: r for n, r in runs.items() if n not in alone}, clocks, done, between)
        for name in alone:
            _alternate({name: runs[name]}, clocks, done, None)
    return {name: done[name] for name in engines}


def _alternate(runs: dict[str, Generator[None, None, Run]], clocks: Mapping[str, Clock],
               done: dict[str, Run], between: Callable[[], None] | None) -> None:
    while runs:
        if between is not None:
            between()
        for name, steps in list(runs.items()):
            clock = clocks[name]
            if isinstance(clock, EngineClock):
                clock.resume()
            try:
                next(steps)
            except StopIteration as stop:
                done[name] = stop.value
                del runs[name]
            finally:
                if isinstance(clock, EngineClock):
                    clock.pause()
