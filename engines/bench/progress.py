"""Progress on stderr: one tqdm bar per stage, each with its total and an ETA; silent when off
or when tqdm is not installed. Every stage's counts are also kept (`stages`), so a run can be
checked for stages that tick without a total or end short of it.

A search's total is its plan: the rounds it will run if nothing unexpected happens (one
widening step, no retry). A round past the plan (a retry, a wider bracket) grows the total
with it, so the bar never runs past 100%; a search that ends early calls `finish()`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Stage:
    text: str
    total: int  # units planned when the stage opened, plus every grow()
    planned: int  # units planned when the stage opened
    done: int = 0
    unit: str = "run"


class Progress:
    def __init__(self, enabled: bool) -> None:
        self.stages: list[Stage] = []
        self._tqdm: Any = None
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._tqdm = tqdm

    def stage(self, text: str, total: int, unit: str = "run") -> None:
        """Close the previous stage's bar and open one for `total` units of this stage."""
        if total < 1:
            raise ValueError(f"progress stage {text!r}: total must be >= 1, got {total}")
        self._close_bar()
        self.stages.append(Stage(text, total, total, unit=unit))
        if self._tqdm is not None:
            self._bar = self._tqdm(total=total, desc=text, unit=unit, file=sys.stderr,
                                   dynamic_ncols=True, mininterval=0.5)

    def grow(self, units: int = 1) -> None:
        """The current stage needs `units` more than planned (a retry, a wider bracket)."""
        stage = self._current()
        stage.total += units
        if self._bar is not None:
            self._bar.total = stage.total
            self._bar.refresh()

    def tick(self, units: int = 1, postfix: Mapping[str, Any] | None = None,
             **more: Any) -> None:
        """`units` more done; past the total, the total grows with them (never over 100%).
        `postfix` and `more`: shown after the bar (the rates a search round probed)."""
        postfix = {**(postfix or {}), **more}
        stage = self._current()
        if stage.done + units > stage.total:
            self.grow(stage.done + units - stage.total)
        stage.done += units
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(units)

    def finish(self) -> None:
        """The current stage ended before its plan did (a search found its answer early):
        its total becomes what it ran."""
        stage = self._current()
        stage.total = stage.done
        if self._bar is not None:
            self._bar.total = stage.done
            self._bar.refresh()

    def _current(self) -> Stage:
        if not self.stages:
            raise RuntimeError("progress: tick() or grow() before any stage()")
        return self.stages[-1]

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self._close_bar()


@contextmanager
def progress(enabled: bool) -> Iterator[Progress]:
    bar = Progress(enabled)
    try:
        yield bar
    finally:
        bar.close()
