"""A long asv setup, watched: a progress line at least every `interval` seconds, on the
console asv writes to, and nothing left running once asv is gone.

What asv 0.6 does with a `setup_cache` (asv/runner.py, Spawner.create_setup_cache; asv/util.py,
check_output): it runs it in a child process that leads a process group of its own, with
stdout and stderr piped into a buffer that asv prints only if the setup fails (or, under
`asv run -v`, line by line among its debug output). So a setup that prints to its own stdout
is still silent for minutes. And asv ends that process group on a KeyboardInterrupt or a
silence past the setup's timeout; if asv itself dies otherwise (SIGTERM or SIGKILL: a CI job
cancelled, `timeout`, a harness that kills the command), no signal reaches that group and the
setup runs on, orphaned, to its end (seen with asv 0.6.6: tests/bench/test_asv_watch.py).

So the watcher
- writes its lines to its own stderr (asv keeps them for a failure report; `-v` shows them)
  and, where it can find it, straight to asv's stdout: the parent's fd 1 under /proc, when it
  is a terminal or a pipe (a regular file only if opened for appending: asv would otherwise
  write its own lines over ours). Not under `-v`, which shows them already;
- checks every `poll` seconds that its parent is still the process that started it; once it
  is not, it says so and ends its process group (itself, and anything it started);
- keeps asv's timeout meaning what it meant. asv ends a setup that has been silent for its
  `timeout` seconds, and the lines above would keep any setup from being silent; so the
  watcher ends one that has made no progress (no stage begun, no step done) for `stall`
  seconds: give it the setup's timeout.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO

INTERVAL_S = 20.0  # well inside the 30 s a silent console may last
POLL_S = 0.5
O_APPEND = 0o2000  # Linux's, as /proc/PID/fdinfo prints the flags (octal)


def asv_console(parent: int) -> TextIO | None:
    """asv's own stdout, opened anew through /proc, if `parent` is an asv process that is not
    already showing the setup's output (-v) and its stdout can take lines from two writers."""
    proc = Path(f"/proc/{parent}")
    try:
        argv = [a.decode(errors="replace") for a in
                (proc / "cmdline").read_bytes().split(b"\0") if a]
        target = os.stat(proc / "fd" / "1")
        flags = int(next(line.split()[1] for line in
                         (proc / "fdinfo" / "1").read_text().splitlines()
                         if line.startswith("flags:")), 8)
    except (OSError, StopIteration, ValueError):
        return None  # not Linux, or not ours to read
    if not any(Path(a).name == "asv" for a in argv[:3]):  # asv, python asv, python -m asv
        return None
    if any(a in ("-v", "--verbose") for a in argv):
        return None
    if not (stat.S_ISFIFO(target.st_mode) or stat.S_ISCHR(target.st_mode)
            or (stat.S_ISREG(target.st_mode) and flags & O_APPEND)):
        return None
    try:
        return open(proc / "fd" / "1", "a", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        return None


class Watch:
    """Progress of one setup: `stage` and `tick` (engines.bench.progress's interface), lines
    at each stage and at least every `interval` seconds, and the orphan check."""

    def __init__(self, name: str, *, interval: float = INTERVAL_S, stall: float | None = None,
                 poll: float = POLL_S, totals: dict[str, int] | None = None) -> None:
        self.name = name
        self.interval = interval
        self.stall = stall  # seconds without progress before it gives up; None: never
        self.totals = totals or {}  # stage name prefix -> ticks it will take, where known
        self.parent = os.getppid()
        self.streams: list[TextIO] = [sys.stderr]
        console = asv_console(self.parent)
        if console is not None:
            console.write("\n")  # asv's "Setting up ..." line has no newline yet
            self.streams.append(console)
        self._console = console
        self._start = self._last = self._progress = time.monotonic()
        self._stage, self._ticks, self._all, self._postfix = "starting", 0, 0, ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(poll,), daemon=True,
                                        name=f"watch {name}")
        self._thread.start()

    # -- engines.bench.progress.Progress's interface ------------------------------------------
    def stage(self, text: str, total: int | None = None, unit: str = "run") -> None:
        with self._lock:
            self._stage, self._ticks, self._postfix = text, 0, ""
            if total is not None:  # the bench states each stage's total: show it
                self.totals[text] = total
            self._progress = time.monotonic()
        self.say()

    def tick(self, units: int = 1, postfix: Mapping[str, Any] | None = None,
             **more: Any) -> None:
        with self._lock:
            self._ticks += units
            self._all += units
            shown = {**(postfix or {}), **more}
            self._postfix = " ".join(f"{k}={v}" for k, v in shown.items())
            self._progress = time.monotonic()

    def grow(self, units: int = 1) -> None:
        """The stage needs more than planned: its total grows (engines.bench.progress)."""
        with self._lock:
            total = self.totals.get(self._stage)
            if total is not None:
                self.totals[self._stage] = total + units

    def finish(self) -> None:
        """The stage ended before its plan: its total becomes what it ran."""
        with self._lock:
            if self._stage in self.totals:
                self.totals[self._stage] = self._ticks

    def close(self, note: str = "done") -> None:
        self._done.set()
        self._thread.join()
        self.say(note)
        if self._console is not None:
            self._console.close()

    # -- output --------------------------------------------------------------------------------
    def current_stage(self) -> str:
        with self._lock:
            return self._stage

    def line(self, note: str | None = None) -> str:
        with self._lock:
            total = next((n for prefix, n in self.totals.items()
                          if self._stage.startswith(prefix)), None)
            done = (f": {self._ticks} of {total} done" if total else
                    f": {self._ticks} done" if self._ticks else "")
            text = (note if note is not None else
                    f"{self._stage}{done}" + (f" ({self._all} in all)" if self._all else "")
                    + (f", last {self._postfix}" if self._postfix else ""))
        return f"{self.name}, {time.monotonic() - self._start:.0f} s: {text}"

    def say(self, note: str | None = None) -> None:
        self._write(self.line(note))
        self._last = time.monotonic()

    def _write(self, text: str) -> None:
        for stream in self.streams:
            with suppress(OSError, ValueError):  # asv's side closed: the orphan check acts
                stream.write(f"    {text}\n")
                stream.flush()

    def _run(self, poll: float) -> None:
        while not self._done.wait(poll):
            try:
                self._check()
            except Exception as exc:  # a watcher that died would leave asv silent again
                self._write(f"{self.name}: the watcher failed: {exc!r}")
                raise

    def _check(self) -> None:
        if os.getppid() != self.parent:
            self.say(f"its parent (pid {self.parent}) is gone: stopping")
            stop()
        now = time.monotonic()
        if self.stall is not None and now - self._progress > self.stall:
            self.say(f"no progress in {self._stage} for {now - self._progress:.0f} s "
                     f"(the setup's timeout is {self.stall:g} s): stopping")
            stop()
        if now - self._last >= self.interval:
            self.say()


def stop() -> None:
    """End this process and what it started: its whole group where it leads one (asv's setup
    processes do), else itself. SIGTERM, as asv itself ends a setup it gives up on."""
    if os.getpgid(0) == os.getpid():
        os.killpg(os.getpid(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def watched(name: str, **kwargs: Any) -> Iterator[Watch]:
    watch = Watch(name, **kwargs)
    try:
        yield watch
    except BaseException as exc:
        watch.close(f"stopped in {watch.current_stage()}: {type(exc).__name__} {exc}".rstrip())
        raise
    watch.close()
