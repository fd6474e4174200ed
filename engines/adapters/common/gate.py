"""The other lockstep, for a library that runs its own loop on a worker thread and calls back
once an iteration (CTranslate2's per-token callback): a Gate holds the worker before each
iteration until `step()` lets one more run, so that a step is exactly one iteration of the
library's loop (the Inbox, engines.adapters.common.inbox, is the lockstep where a step is
whatever the library produced meanwhile).

The worker, inside `with gate.cond:`, calls `next_round()` when an iteration is complete and
`wait_turn()` before it computes the next; `finish(error)` when its loop ends. `step()` calls
`run_one()`, which lets one iteration run and returns once it completed (or the loop ended),
raising on the caller's thread what the worker raised; it also holds `cond` then, so that the
caller reads the worker's results consistently (`with gate.cond:` around `run_one()`).
`cancel()` lets the worker run to its end.
"""

from __future__ import annotations

import threading

__all__ = ["Gate"]


class Gate:
    """One worker thread's loop, one iteration per `run_one()`."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.allowed = 0  # iterations step() has let the worker run
        self.round = 0  # the iteration the worker is at (0: the first)
        self.done = False
        self.error: BaseException | None = None

    def next_round(self) -> None:
        """The worker (holding cond): the current iteration is complete."""
        self.round += 1
        self.cond.notify_all()

    def wait_turn(self) -> None:
        """The worker (holding cond): wait until step() lets the current iteration run."""
        while self.allowed <= self.round:
            self.cond.wait()

    def finish(self, error: BaseException | None = None) -> None:
        """The worker: its loop ended (with `error`, if it raised)."""
        with self.cond:
            self.error = error
            self.done = True
            self.cond.notify_all()

    def run_one(self) -> None:
        """step() (holding cond): let one iteration run and wait until it completed or the
        loop ended; raise what the worker raised."""
        self.allowed += 1
        self.cond.notify_all()
        while not self.done and self.round < self.allowed:
            self.cond.wait()
        if self.error is not None:
            raise self.error

    def cancel(self) -> None:
        """Let the worker run to its end unheld."""
        with self.cond:
            self.allowed = 1 << 62
            self.cond.notify_all()
