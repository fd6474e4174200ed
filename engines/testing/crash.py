"""An exception from the engine under test, read as a finding like any other: which protocol
call raised, at which step, with which requests in flight, the exception's type and message,
and the engine's own frames (the suite's hidden). The report adds the runnable script.

Only what the engine raised inside one of its protocol calls is the engine's: an exception
raised by the suite's own code propagates unchanged, never disguised as a finding.
"""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = ["EngineCrashed", "StepTimeout", "call_engine", "engine_frames", "step_deadline"]

T = TypeVar("T")
SUITE = Path(__file__).resolve().parent  # engines/testing: frames here are the suite's
FRAMES = 10  # engine frames shown per exception: the outermost 2 and the innermost 8
CHAINED = 3  # exceptions of a chain shown (the engine's own, and what caused it)
_HEAD = 200  # characters of the exception's message in the first line
_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


class StepTimeout(Exception):
    """A protocol call ran past the step timeout (raised into the engine by SIGALRM)."""


class EngineCrashed(AssertionError):
    """The engine raised (or hung) inside a protocol call.

    str() is the whole finding: a sentence (call, step, exception), the requests in flight,
    the engine's frames, and, once a report sets `replay`, the script that raises it. Any
    check catches a crash, so reports label it `crash`, whichever check was running.
    """

    prop = "crash"

    def __init__(self, sentence: str, *, in_flight: str = "", frames: str = "",
                 call: str = "", step: int | None = None,
                 exception: BaseException | None = None) -> None:
        super().__init__(sentence)
        self.sentence = sentence
        self.call = call  # the protocol call that raised, e.g. "step()"
        self.in_flight = in_flight
        self.frames = frames
        self.step = step  # the step the failing run was at (None: not in a run of steps)
        self.exception = exception  # the engine's own exception, whole traceback included
        self.notes: list[str] = []  # what the suite learned since (e.g. a fresh engine's run)
        # A runnable script of what crashed, where that is not the workload being judged
        # (a request the oracle served alone, with the history it needed), and its intro.
        self.replay: str | None = None
        self.replay_intro = "The crash as a runnable script"

    def __str__(self) -> str:
        return self.report(self.replay, self.replay_intro)

    def report(self, replay: str | None, intro: str) -> str:
        """The finding, with `replay` (a runnable script) after `intro` where there is one."""
        parts = [f"crash: {self.sentence}"]
        if self.in_flight:
            parts.append(f"In flight: {self.in_flight}.")
        parts += self.notes
        if self.frames:
            parts.append(self.frames.rstrip("\n"))
        text = "\n".join(parts)
        if replay is not None:
            text += f"\n\n{intro}:\n\n{replay}\n"
        return text

    @property
    def raises(self) -> str:
        """What a replay of it does, in words: 'raises IndexError in step() at step 3'."""
        exc, where = self.exception, f"in {self.call} at step {self.step}"
        if isinstance(exc, StepTimeout):
            return f"hangs {where}"
        if exc is None:
            return "does not finish"
        return f"raises {type(exc).__name__} {where}"


@contextmanager
def step_deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt a call that runs longer than `seconds`: a looping engine must fail, not hang.

    Uses SIGALRM, so it only arms in the main thread of a Unix process (as under pytest and
    pytest-xdist workers); elsewhere the step bound is the only guard.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    if not hasattr(signal, "setitimer"):
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise StepTimeout(f"did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_suite(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(SUITE)
    except (OSError, ValueError):
        return False


def _frames_after_caller(tb: TracebackType | None) -> list[TracebackType]:
    """The traceback's entries below the frame that caught it (call_engine's own)."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries[1:]


def raised_by_suite(exc: BaseException) -> bool:
    """Whether the exception was raised by the suite's own code, not by the engine: its
    innermost frame is the suite's. (A C-implemented engine method that raises leaves no
    frame of its own: the engine's too.)"""
    if isinstance(exc, StepTimeout):  # raised in the suite's signal handler, for the engine
        return False
    inner = _frames_after_caller(exc.__traceback__)
    return bool(inner) and _in_suite(inner[-1].tb_frame.f_code.co_filename)


def _chain(exc: BaseException) -> list[tuple[BaseException, str]]:
    """The exception and what caused it, oldest first, each with the sentence Python prints
    between two links."""
    links: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen and len(links) < CHAINED:
        seen.add(id(current))
        links.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    return links[::-1]


def _format_stack(exc: BaseException) -> list[str]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _in_suite(f.filename)]
    if len(frames) <= FRAMES:
        return list(traceback.StackSummary.from_list(frames).format())
    hidden = len(frames) - FRAMES
    return [*traceback.StackSummary.from_list(frames[:2]).format(),
            f"  ... {hidden} frame(s) of the engine's hidden ...\n",
            *traceback.StackSummary.from_list(frames[2 - FRAMES:]).format()]


def engine_frames(exc: BaseException) -> str:
    """The exception's traceback with the suite's frames hidden: the engine's frames, from
    the protocol method it entered, then the exception (and what caused it)."""
    lines = ["The engine's traceback (most recent call last; the suite's frames hidden):\n"]
    links = _chain(exc)
    for i, (link, between) in enumerate(links):
        lines += _format_stack(link)
        lines += traceback.format_exception_only(type(link), link)
        if i + 1 < len(links):
            lines.append(f"{between}\n")
    return "".join(lines)


def _head(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return first if len(first) <= _HEAD else first[: _HEAD - 3] + "..."


def call_engine(what: str, step: int, fn: Callable[[], T], deadline: float | None,
                in_flight: Callable[[], str] | None = None, where: str = "") -> T:
    """fn(), one protocol call of the engine's (`what`, at `step`), under the step deadline.
    EngineCrashed if the engine raises or hangs in it; `in_flight` says what was in flight
    and `where` what the suite was doing (e.g. serving a request alone)."""
    try:
        with step_deadline(deadline):
            return fn()
    except (StepTimeout, Exception) as exc:
        if raised_by_suite(exc):
            raise
        at = f"at step {step}" + (f" {where}" if where else "")
        if isinstance(exc, StepTimeout):
            sentence = f"the engine's {what} {exc} {at}"
        else:
            sentence = f"the engine raised {type(exc).__name__} in {what} {at}: {_head(exc)}"
        raise EngineCrashed(sentence, in_flight=in_flight() if in_flight else "",
                            frames=engine_frames(exc), call=what, step=step,
                            exception=exc) from exc
