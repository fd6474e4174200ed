"""stateful: a Hypothesis state machine (engines.testing.stateful) that adds, aborts and
steps in any order, judging every check at its moments (a check's `machine`) and at teardown.
It runs the machine instead of workloads, so its property is None."""

from __future__ import annotations

from engines.testing.checks.base import Check

__all__ = ["CHECK"]

CHECK = Check("stateful", None)
