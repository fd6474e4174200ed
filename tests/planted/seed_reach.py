"""Which of the seed workloads (engines.testing.seed_workloads) reach a bug planted for one of
them (tests/planted/revisit_bugs.py): the workloads by label, in the bug's context. Shared by
the tests of the checks that catch those bugs and tests/testing/test_seed_workloads.py."""

from __future__ import annotations

from collections.abc import Callable

from engines.protocol import Engine
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.seed_workloads import seed_workloads
from engines.testing.workload import Workload

__all__ = ["AGAIN", "SEEDED", "seed_context", "split"]

AGAIN = "the same prompts again after they finished"
SEEDED = "seeded sampling"


def seed_context(factory: Callable[[], Engine], **variants: Callable[[], Engine]
                 ) -> SuiteContext:
    return build_context(factory, name=getattr(factory, "__name__", "engine"),
                         options=SuiteOptions(variants=variants))


def split(ctx: SuiteContext, label: str) -> tuple[list[Workload], list[Workload]]:
    """(the seed workloads whose label holds `label`, the others)."""
    seeds = seed_workloads(ctx.limits, alone=ctx.oracle.tokens)
    return ([w for w in seeds if label in w.label], [w for w in seeds if label not in w.label])
