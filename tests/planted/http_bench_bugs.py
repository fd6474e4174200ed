"""Planted bugs for the bench over HTTP (tests/bench/test_http.py): a server adapter that
hides what the bench needs to time a streaming engine the way its client sees it."""

from __future__ import annotations

from engines.adapters.http import HTTPEngine


class NoArrivalTimes(HTTPEngine):
    """Reports no token arrival times: the bench times its tokens by the step that returned
    them, so TTFT and ITL become the driver's polling pattern."""

    arrival_times = None  # type: ignore[assignment]


class NoStepBy(HTTPEngine):
    """Has no deadline-bounded step: while a stream is slow, step() waits for its next token
    past the instant the next request is due, and the open-loop driver sends it late."""

    step_by = None  # type: ignore[assignment]
