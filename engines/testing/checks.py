"""The checks: one registry (REGISTRY), each check one object, and the one place that decides
which checks apply to an engine, and why one does not.

A check runs, is skipped (with the reason printed: the engine lacks an optional protocol, or
the run was not given what the check compares against), or runs as a strict xfail (the engine
declared it breaks it, in `expected_failed_checks`). Nothing else in the suite decides this.

Everything the suite does by check derives from REGISTRY: the catalogue's order and the test
ids (`<engine>-<check>`), the skip and xfail decision, what each check draws, when the state
machine judges it, and what it adds to the coverage summary. A new check is a property
function in a file of its own under `properties/` and one `Check(...)` line below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from engines.testing.coverage import Coverage
from engines.testing.limits import EngineLimits
from engines.testing.properties import (
    Judge,
    drain,
    kv,
    logprobs,
    parity,
    requests,
    seeds,
    slots,
)
from engines.testing.recorder import Trace

__all__ = ["CHECKS", "KV", "LOAD", "PROPERTIES", "REFERENCE", "REGISTRY", "SLOTS", "SLOT_CHECKS",
           "VARIANTS", "Applicability", "Check", "Draws", "Given", "Need", "Property",
           "applicability", "catalogue", "check_named", "draws_sampling"]

# A property judges one Trace: it raises Violation, or returns what it judged (None, or what
# the check's `tally` adds to the coverage summary).
Property = Callable[[Trace, Judge], Any]
# When the state machine judges a check besides at teardown (when it judges every check).
Moment = Literal["step", "bad request", "has_work lied"]


@dataclass(frozen=True, slots=True)
class Given:
    """What a run gives the checks: the engine's limits, a reference engine, config variants."""

    limits: EngineLimits
    reference: bool = False
    variants: bool = False
    kv_variants: bool = False  # some variant has KVIntrospection of its own


@dataclass(frozen=True, slots=True)
class Need:
    """Something a check cannot run without, and the skip reason where a run lacks it."""

    name: str  # what it is, for reading (a repr)
    met: Callable[[Given], bool]
    reason: str  # "{check}" stands for the check's name

    def skip_reason(self, check: str) -> str:
        return self.reason.format(check=check)


SLOTS = Need("slot introspection", lambda g: g.limits.max_batch_size is not None,
             "{check} needs engines.protocol.SlotIntrospection")
KV = Need("KV introspection", lambda g: g.limits.kv or g.kv_variants,
          "{check} needs engines.protocol.KVIntrospection (on the engine or a variant)")
LOAD = Need("load introspection", lambda g: g.limits.load,
            "{check} needs engines.protocol.LoadIntrospection (a server's own count of "
            "running requests and KV use, e.g. vLLM's /metrics)")
REFERENCE = Need("a reference engine", lambda g: g.reference,
                 "no reference engine given (--reference-engine MODULE:CALLABLE, e.g. "
                 "engines.sequential:SequentialEngine over the same weights)")
VARIANTS = Need("config variants", lambda g: g.variants,
                "no config variant given (--engine-variant NAME=MODULE:CALLABLE)")


@dataclass(frozen=True, slots=True)
class Draws:
    """How a check draws its workloads, where it differs from the others."""

    bad: tuple[int, int] = (0, 1)  # bad requests per drawn workload, fewest and most
    bad_seed_workloads: bool = False  # the hand-picked seed workloads are the bad-input ones
    seed_groups: bool = False  # workloads carry one prompt under several distinct seeds
    logprobs: int = 0  # top logprobs every drawn request asks for, at least


@dataclass(frozen=True, slots=True)
class Check:
    """One check: its name (in test ids, reports and `expected_failed_checks`), its property,
    what it needs, how it draws, when the state machine judges it, what it tallies."""

    name: str
    prop: Property | None  # None: the check runs the state machine instead of workloads
    needs: tuple[Need, ...] = ()  # the first one a run lacks is the skip reason
    draws: Draws = field(default_factory=Draws)
    # It judges seeded sampling: it draws seeded requests even where the engine declared it
    # broken (a strict xfail must be able to fail), and then no other check draws any.
    sampling: bool = False
    machine: frozenset[Moment] = frozenset()  # when the machine judges it before teardown
    # What a passing run's judgement (the property's return value) adds to the summary.
    tally: Callable[[Coverage, Any], None] | None = None

    @property
    def runs(self) -> Literal["workloads", "machine"]:
        return "machine" if self.prop is None else "workloads"

    def skip_reason(self, given: Given) -> str | None:
        for need in self.needs:
            if not need.met(given):
                return need.skip_reason(self.name)
        return None


# Top logprobs the logprobs check asks of every request: enough for a neighbour's to differ.
LOGPROBS = 5
# Cheap enough to judge the partial trace after every step.
_EVERY_STEP: frozenset[Moment] = frozenset({"step"})

# In the order a report lists them; test ids read <engine>-<check>.
REGISTRY: tuple[Check, ...] = (
    Check("parity", parity.check_parity),
    Check("reference_parity", parity.check_reference_parity, needs=(REFERENCE,)),
    Check("prefill_decode", parity.check_prefill_decode),
    Check("variants", parity.check_variants, needs=(VARIANTS,)),
    Check("seeds", seeds.check_seeds, draws=Draws(seed_groups=True), sampling=True,
          tally=Coverage.record_seed_groups),
    Check("logprobs", logprobs.check_logprobs, draws=Draws(logprobs=LOGPROBS),
          tally=logprobs.tally),
    Check("token_range", requests.check_token_range),
    Check("budget_finish", requests.check_budget_finish, machine=_EVERY_STEP),
    Check("liveness", requests.check_liveness, machine=frozenset({"has_work lied"})),
    Check("bad_input", requests.check_bad_input, draws=Draws(bad=(1, 2), bad_seed_workloads=True),
          machine=frozenset({"bad request"}), tally=Coverage.record_unrechecked),
    Check("compaction", slots.check_compaction, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("slot_lengths", slots.check_slot_lengths, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("zero_waste", slots.check_zero_waste, needs=(SLOTS,), machine=_EVERY_STEP),
    Check("work_conservation", slots.check_work_conservation, needs=(SLOTS,)),
    Check("kv_accounting", kv.check_kv_accounting, needs=(KV,), tally=kv.tally),
    Check("drain", drain.check_drain, needs=(LOAD,)),
    Check("stateful", None),
)


def catalogue() -> tuple[Check, ...]:
    """The registry as it is now (read at each call, so that every view below agrees)."""
    return REGISTRY


def check_named(name: str) -> Check:
    for check in catalogue():
        if check.name == name:
            return check
    raise KeyError(f"no check named {name!r}; the checks are "
                   f"{', '.join(c.name for c in catalogue())}")


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
