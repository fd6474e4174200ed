"""The one place that decides which checks apply to an engine, and why one does not.

A check runs, is skipped (with the reason printed: the engine lacks an optional protocol, or
the run was not given what the check compares against), or runs as a strict xfail (the engine
declared it breaks it, in `expected_failed_checks`). Nothing else in the suite decides this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engines.testing.limits import EngineLimits

__all__ = ["CHECKS", "SLOT_CHECKS", "Applicability", "applicability"]

# In the order a report lists them; test ids read <engine>-<check>.
CHECKS = (
    "parity",
    "reference_parity",
    "prefill_decode",
    "variants",
    "seeds",
    "token_range",
    "budget_finish",
    "liveness",
    "bad_input",
    "compaction",
    "slot_lengths",
    "zero_waste",
    "work_conservation",
    "kv_accounting",
    "stateful",
)
SLOT_CHECKS = frozenset({"compaction", "slot_lengths", "zero_waste", "work_conservation"})


@dataclass(frozen=True, slots=True)
class Applicability:
    status: Literal["run", "skip", "xfail"]
    reason: str = ""


def _skip_reason(check: str, limits: EngineLimits, *, reference: bool,
                 variants: bool) -> str | None:
    if check in SLOT_CHECKS and limits.max_batch_size is None:
        return f"{check} needs engines.protocol.SlotIntrospection"
    if check == "kv_accounting" and not limits.kv:
        return "kv_accounting needs engines.protocol.KVIntrospection"
    if check == "reference_parity" and not reference:
        return ("no reference engine given (--reference-engine MODULE:CALLABLE, e.g. "
                "engines.sequential:SequentialEngine over the same weights)")
    if check == "variants" and not variants:
        return "no config variant given (--engine-variant NAME=MODULE:CALLABLE)"
    return None


def applicability(limits: EngineLimits, declared: Mapping[str, str], *, reference: bool = False,
                  variants: bool = False) -> dict[str, Applicability]:
    """Every check's fate on an engine with these limits and declared expected failures,
    given whether the run has a reference engine and config variants."""
    out: dict[str, Applicability] = {}
    for check in CHECKS:
        skip = _skip_reason(check, limits, reference=reference, variants=variants)
        if skip is not None:
            out[check] = Applicability("skip", skip)
        elif check in declared:
            out[check] = Applicability("xfail", declared[check])
        else:
            out[check] = Applicability("run")
    return out
