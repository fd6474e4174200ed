"""How the checks' tests run a planted LoRA or tenant bug (tests/planted/lora_bugs.py): on the
paged engine built with the zoo's adapters, against the PEFT reference, each engine built
fresh; the correct engine is run the same way (tests/planted/expect.passes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engines.loras import zoo_loras
from engines.models import DEFAULT_PRESET
from engines.paged import PagedEngine
from engines.protocol import Engine
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.judging import Violation
from engines.testing.stateful import run_engine_machine
from engines.zoo import ZOO_ADAPTERS, sequential_with_loras
from tests.planted.harness import fresh_engines, hunt, pinned

__all__ = ["EXAMPLES", "MACHINE_EXAMPLES", "caught_on_the_zoos_adapters", "lora_context",
           "settings_for", "with_zoo_loras"]

MACHINE = "stateful"
EXAMPLES = 12  # workloads after the seed workloads (those catch most of these)
MACHINE_EXAMPLES = 40


def with_zoo_loras(cls: type[PagedEngine]) -> Callable[[], Engine]:
    """A factory of `cls` serving the zoo's adapters."""
    def make() -> Engine:
        return cls(DEFAULT_PRESET, loras=zoo_loras(DEFAULT_PRESET, ZOO_ADAPTERS))

    make.__name__ = make.__qualname__ = f"{cls.__name__}_with_loras"
    return make


def lora_context(factory: Callable[[], Engine]) -> SuiteContext:
    """The factory's context against the PEFT reference; the PEFT reference needs peft (a
    skip says so where it is missing)."""
    pytest.importorskip("peft")
    ctx = build_context(factory, name=factory.__name__,
                        options=SuiteOptions(reference=sequential_with_loras))
    fresh_engines(ctx)  # the stateful machine's pool too, not only hunt's
    return ctx


def settings_for(check: str) -> Any:
    return pinned(MACHINE_EXAMPLES if check == MACHINE else EXAMPLES)


def caught_on_the_zoos_adapters(bug: type[PagedEngine]) -> None:
    """The suite's check meant for the bug (its tenant draws, the isolation check, the state
    machine's adapter swaps) catches it."""
    check = bug.caught_by  # type: ignore[attr-defined]
    ctx = lora_context(with_zoo_loras(bug))
    caught: Violation | None = None
    if check != MACHINE:
        caught = hunt(None, ctx=ctx, check=check, settings=settings_for(check))
    else:
        try:
            run_engine_machine(ctx, settings=settings_for(check))
        except Violation as found:
            caught = found
    assert caught is not None, f"{bug.__name__} passed {check}"
    assert str(caught).startswith(f"{check}:") or check == MACHINE, str(caught)[:400]
