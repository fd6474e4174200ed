"""The suite itself (its tenant draws, the isolation check, the state machine's adapter swaps)
catches each planted LoRA and tenant bug (tests/planted/lora_bugs.py) on the paged engine
built with the zoo's adapters, against the PEFT reference; the correct engine passes the same
checks under the same settings."""

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
from engines.zoo import ZOO_ADAPTERS, paged_with_loras, sequential_with_loras
from tests.planted.harness import fresh_engines, hunt, pinned
from tests.planted.lora_bugs import LORA_PLANTED

pytest.importorskip("peft")

MACHINE = "stateful"
EXAMPLES = 12  # workloads after the seed workloads (those catch most of these)
MACHINE_EXAMPLES = 40


def _factory(cls: type[PagedEngine]) -> Callable[[], Engine]:
    def make() -> Engine:
        return cls(DEFAULT_PRESET, loras=zoo_loras(DEFAULT_PRESET, ZOO_ADAPTERS))

    make.__name__ = make.__qualname__ = f"{cls.__name__}_with_loras"
    return make


def _context(factory: Callable[[], Engine]) -> SuiteContext:
    ctx = build_context(factory, name=factory.__name__,
                        options=SuiteOptions(reference=sequential_with_loras))
    fresh_engines(ctx)  # the stateful machine's pool too, not only hunt's
    return ctx


def _run(factory: Callable[[], Engine], check: str) -> Violation | None:
    ctx = _context(factory)
    if check != MACHINE:
        return hunt(None, ctx=ctx, check=check, settings=pinned(EXAMPLES))
    try:
        run_engine_machine(ctx, settings=pinned(MACHINE_EXAMPLES))
    except Violation as caught:
        return caught
    return None


@pytest.mark.parametrize("bug", list(LORA_PLANTED), ids=lambda b: b.__name__)
def test_the_suite_catches_the_planted_lora_bug(bug: type[PagedEngine]) -> None:
    check = LORA_PLANTED[bug]
    caught = _run(_factory(bug), check)
    assert caught is not None, f"{bug.__name__} passed {check}"
    assert str(caught).startswith(f"{check}:") or check == MACHINE, str(caught)[:400]


@pytest.mark.parametrize("check", sorted(set(LORA_PLANTED.values())))
def test_the_correct_engine_passes_the_same_checks(check: str) -> None:
    caught: Any = _run(paged_with_loras, check)
    assert caught is None, str(caught)[:2000]
