"""The one place that decides which checks apply to an engine, and why one does not.

A check runs, is skipped (with the reason printed: the engine lacks an optional protocol, or
the run was not given what the check compares against), or runs as a strict xfail (the engine
declared it breaks it, in `expected_failed_checks`). Nothing else in the suite decides this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engines.testing.strategies import EngineLimits

__all__ = ["CHECKS", "Applicability", "applicability"]

# In the order a report lists them; test ids read <engine>-<check>.
CHECKS = (
    "parity",
    "budget_finish",
    "liveness",
    "bad_input",
    "compaction",
    "slot_lengths",
    "zero_waste",
    "work_conservation",
    "stateful",
)
SLOT_CHECKS = frozenset({"compaction", "slot_lengths", "zero_waste", "work_conservation"})


@dataclass(frozen=True, slots=True)
class Applicability:
    status: Literal["run", "skip", "xfail"]
    reason: str = ""


def applicability(limits: EngineLimits, declared: Mapping[str, str]) -> dict[str, Applicability]:
    """Every check's fate on an engine with these limits and declared expected failures."""
    out: dict[str, Applicability] = {}
    for check in CHECKS:
        if check in SLOT_CHECKS and limits.max_batch_size is None:
            out[check] = Applicability("skip", f"{check} needs engines.protocol.SlotIntrospection")
        elif check in declared:
            out[check] = Applicability("xfail", declared[check])
        else:
            out[check] = Applicability("run")
    return out
