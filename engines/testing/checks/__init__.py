"""The checks: one registry (REGISTRY), each check one object in a file of its own named after
it (engines/testing/checks/<check>.py, which binds it to `CHECK`), and the one place that
decides which checks apply to an engine, and why one does not.

A check runs, is skipped (with the reason printed: the engine lacks an optional protocol, or
the run was not given what the check compares against), or runs as a strict xfail (the engine
declared it breaks it, in `expected_failed_checks`). Nothing else in the suite decides this.

Everything the suite does by check derives from REGISTRY: the catalogue's order and the test
ids (`<engine>-<check>`), the skip and xfail decision, what each check draws, when the state
machine judges it, and what it adds to the coverage summary. A new check is one file here: its
property (taking its Check, raising `check.fail`), its Tally if it counts anything, and its
`CHECK = Check(...)`, whose name is the file's. The registry finds it; ORDER below only places
it in reports (a check it does not name comes last, in file-name order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engines.protocol import unknown_name
from engines.testing.checks.base import Check, Given, Moment, Need, Property, Use
from engines.testing.checks.needs import (
    BEAMS,
    CHILDREN,
    KV,
    LOAD,
    PROMPT_LOGPROBS,
    REFERENCE,
    SLOTS,
    STOP_STRINGS,
    TOKENIZER,
    VARIANTS,
)
from engines.testing.coverage import Coverage
from engines.testing.limits import EngineLimits
from engines.testing.registry import discover
from engines.testing.spec_coverage import speculation_notes

__all__ = ["BEAMS", "CHECKS", "CHILDREN", "KV", "LOAD", "ORDER", "PROMPT_LOGPROBS", "PROPERTIES",
           "REFERENCE", "REGISTRY", "SLOTS", "SLOT_CHECKS", "STOP_STRINGS", "TOKENIZER",
           "VARIANTS", "Applicability", "Check", "Given", "Moment", "Need", "Property", "Use",
           "applicability", "catalogue", "check_named", "draws_sampling", "known_checks",
           "summary_notes"]

# The order a report lists the checks in (and pytest runs them): the cheap universal ones
# first, the slot and KV views after, the state machine last.
ORDER: tuple[str, ...] = (
    "parity", "reference_parity", "prefill_decode", "variants", "seeds", "logprobs",
    "prompt_logprobs", "greedy_filters", "low_temperature", "sampling_distribution",
    "sequence_distribution",
    "constraints", "streamed_text", "stop_strings", "children", "beam_search", "token_range",
    "budget_finish", "liveness", "bad_input", "compaction", "slot_lengths", "zero_waste",
    "work_conservation", "kv_accounting", "drain", "isolation", "stateful",
)
# Modules of this package that are not checks.
_NOT_CHECKS = frozenset({"base", "needs"})


# In the order a report lists them; test ids read <engine>-<check>.
REGISTRY: tuple[Check, ...] = discover(__name__, __path__, "CHECK", Check, order=ORDER,
                                        skip=_NOT_CHECKS)


def catalogue() -> tuple[Check, ...]:
    """The registry as it is now (read at each call, so that every view below agrees)."""
    return REGISTRY


def check_named(name: str) -> Check:
    for check in catalogue():
        if check.name == name:
            return check
    raise KeyError(f"no check named {name!r}; the checks are "
                   f"{', '.join(c.name for c in catalogue())}")


def known_checks(declared: Mapping[str, str], *, who: str = "expected_failed_checks") -> None:
    """Every check an engine declares broken is one of the registry's: a ValueError names a
    misspelt one (and the nearest real name), which would otherwise declare nothing."""
    names = [c.name for c in catalogue()]
    for name in declared:
        if name not in names:
            raise ValueError(unknown_name(f"{who}: check", name, names))


def summary_notes(data: Mapping[str, int]) -> list[str]:
    """The coverage summary's notes for one engine: what no workload could reach, then each
    check's own sentences (its Tally's), in registry order."""
    out = Coverage.notes(data)
    for check in catalogue():
        if check.tally is not None:
            out += check.tally.notes(data, check.name)
    return out + speculation_notes(data)  # engines.testing.spec_coverage


def draws_sampling(declared: Mapping[str, str]) -> bool:
    """Whether the checks may draw sampled requests: not where the engine declared the check
    that judges seeded sampling broken."""
    return not any(c.sampling and c.name in declared for c in catalogue())


# Views of the registry, for code that wants the names only.
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
SLOT_CHECKS: frozenset[str] = frozenset(c.name for c in REGISTRY if SLOTS in c.needs)
PROPERTIES: dict[str, Property] = {c.name: c.prop for c in REGISTRY if c.prop is not None}


@dataclass(frozen=True, slots=True)
class Applicability:
    status: Literal["run", "skip", "xfail"]
    reason: str = ""


def applicability(limits: EngineLimits, declared: Mapping[str, str], *, reference: bool = False,
                  variants: bool = False, kv_variants: bool = False
                  ) -> dict[str, Applicability]:
    """Every check's fate on an engine with these limits and declared expected failures,
    given whether the run has a reference engine and config variants (and whether any of
    them has a KV view)."""
    given = Given(limits, reference=reference, variants=variants, kv_variants=kv_variants)
    out: dict[str, Applicability] = {}
    for check in catalogue():
        skip = check.skip_reason(given)
        if skip is not None:
            out[check.name] = Applicability("skip", skip)
        elif check.name in declared:
            out[check.name] = Applicability("xfail", declared[check.name])
        else:
            out[check.name] = Applicability("run")
    return out
