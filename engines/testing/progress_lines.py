"""Progress lines while a conformance check runs, so that a long run is never silent.

A check's test says when it starts (pytest's own line says it under -v, so not then) and,
while it runs, at least every `interval` seconds (--progress-interval, 30 by default; 0: no
lines) what it is doing: which seed workload, how many examples it has run, or that it is
shrinking a failure and for how long. The lines are written at the points the suite passes
anyway (each seed workload, each example, each shrink step), not by a thread: a single engine
run longer than the interval delays its line, and nothing writes while the engine runs.

Where they go: through pytest's terminal reporter, with pytest's capturing suspended as its
live logging does, so that they show under -q and -s alike; nowhere under `-p no:terminal`.
An xdist worker's terminal is not the user's (its stdout is /dev/null) and xdist has no channel
for a worker's lines, so a worker writes its lines to its stderr, which is the controller's,
prefixed with its id as xdist's own worker messages are, and only the periodic ones (the
controller already shows each test as it ends).

Only the suite's checks make these lines (the plugin changes nothing in runs that do not use
the suite); library code calls the module functions below, which do nothing outside a check.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

__all__ = ["DEFAULT_INTERVAL", "PREFIX", "CheckProgress", "doing", "example", "failure",
           "running", "seed_workload", "tick", "watching", "writer"]

DEFAULT_INTERVAL = 30.0
PREFIX = "batching-engines: "

Write = Callable[[str], None]


class CheckProgress:
    """One check's run: what it is doing, said every `interval` seconds through `write`."""

    def __init__(self, name: str, write: Write, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._write = write
        self.interval = interval
        self._clock = clock
        self.started = self._last = clock()
        self.examples = 0  # Hypothesis examples (or state machine runs) begun
        self.seed: tuple[int, int] | None = None  # (index, count) of the seed workload running
        self.failed_at: float | None = None  # when the first failure was found
        self.examples_at_failure = 0
        self.doing: str | None = None  # what the report's making is doing (after the search)

    def say(self, text: str) -> None:
        self._write(f"{PREFIX}{self.name}: {text}")
        self._last = self._clock()

    def status(self) -> str:
        now = self._clock()
        head = f"{now - self.started:.0f} s"
        if self.doing is not None:
            return f"{head}, {self.doing}"
        if self.failed_at is not None:
            tried = self.examples - self.examples_at_failure
            return (f"{head}, shrinking a failure for {now - self.failed_at:.0f} s "
                    f"({tried} smaller example(s) tried)")
        if self.examples:
            after = " after the seed workloads" if self.seed is not None else ""
            return f"{head}, {self.examples} example(s) run{after}"
        if self.seed is not None:
            return f"{head}, seed workload {self.seed[0]} of {self.seed[1]}"
        return f"{head}, building engines and serving requests alone"

    def tick(self) -> None:
        if self.interval > 0 and self._clock() - self._last >= self.interval:
            self.say(self.status())


_current: ContextVar[CheckProgress | None] = ContextVar("progress", default=None)


def seed_workload(index: int, count: int) -> None:
    """The running check starts seed workload `index` (1-based) of `count`."""
    found = _current.get()
    if found is not None:
        found.seed = (index, count)
        found.tick()


def example() -> None:
    """The running check starts a Hypothesis example, a state machine run, or a shrink step."""
    found = _current.get()
    if found is not None:
        found.examples += 1
        found.tick()


def doing(what: str) -> None:
    """The running check's report is being made: `what` it is doing (replaying the failure,
    shrinking a leak's history), said from now on instead of the search's state."""
    found = _current.get()
    if found is not None:
        found.doing = what
        found.tick()


def tick() -> None:
    """The running check is still at work (a state machine's step): a line if one is due."""
    found = _current.get()
    if found is not None:
        found.tick()


def failure() -> None:
    """The running check found a failure: what follows is shrinking it (the first call
    counts; Hypothesis' shrink steps that fail again call it too)."""
    found = _current.get()
    if found is not None and found.failed_at is None:
        before = found.status()
        found.failed_at = found._clock()
        found.examples_at_failure = found.examples
        found.say(f"{before}: found a failure, shrinking it")


def writer(config: Any) -> tuple[Write, bool] | None:
    """How this pytest process writes a progress line, and whether it is an xdist worker;
    None where the run has no terminal reporter (`-p no:terminal`)."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is None:
        return None
    capture = config.pluginmanager.getplugin("capturemanager")
    worker = getattr(config, "workerinput", None)

    def write(line: str) -> None:
        with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
            if worker is not None:
                sys.stderr.write(f"[{worker.get('workerid', 'worker')}] {line}\n")
                sys.stderr.flush()
            else:
                # After -v's test id awaiting its outcome, or -q's dots: a line of its own.
                reporter.ensure_newline()
                if config.get_terminal_writer().width_of_current_line:
                    reporter.write("\n")
                reporter.write_line(line)
                reporter.flush()

    return write, worker is not None


@contextmanager
def watching(config: Any, name: str, interval: float) -> Iterator[CheckProgress | None]:
    """Progress lines for the check `name` (<engine>-<check>) while the block runs."""
    found = writer(config) if interval > 0 else None
    if found is None:
        yield None
        return
    write, worker = found
    progress = CheckProgress(name, write, interval)
    if not worker and config.get_verbosity() <= 0:
        progress.say("started")
    with running(progress):
        yield progress


@contextmanager
def running(progress: CheckProgress) -> Iterator[CheckProgress]:
    """`progress` is the running check's while the block runs (the module functions report
    to it)."""
    token = _current.set(progress)
    try:
        yield progress
    finally:
        _current.reset(token)
