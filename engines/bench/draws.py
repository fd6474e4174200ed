"""Seeded request draws (prompt and budget per request), scaled to the engine's context.

The serving series' continuous-batching part (docs/references.md) drew prompts from a fixed
set of lengths with one very long class (4096 tokens with a 256-token budget, so up to 4352 of
context) and gave most requests the full budget, some a smaller one. `mixed` keeps those
proportions for any `max_model_len`: the budget is 1/17 of the context and the length classes
are fractions of the longest prompt that still fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.protocol import Request, SamplingParams

# The longest class gets the whole context left after the budget; the rest are these fractions
# of it (128..1024 of 4096 in the write-up). Mean prompt ~1/4 of the longest, as there.
PROMPT_FRACTIONS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1.0)
# A draw keeps the default budget with this probability, else takes 1/16 .. 1/2 of it. The
# mean, 0.617 of the budget, is the write-up's measured one (158 tokens a request of 256).
FULL_BUDGET_P = 0.5
SMALL_BUDGET_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One request of a workload, before it is given a request id."""

    prompt_token_ids: tuple[int, ...]
    max_tokens: int

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    def to_request(self, request_id: str) -> Request:
        return Request(self.prompt_token_ids, SamplingParams(max_tokens=self.max_tokens),
                       request_id=request_id)


def _prompt(rng: np.random.Generator, length: int, vocab_size: int) -> tuple[int, ...]:
    return tuple(int(t) for t in rng.integers(0, vocab_size, size=length))


def default_budget(max_model_len: int) -> int:
    """256 for the write-up's 4352-token context, scaled down with it (at least 4)."""
    return max(4, max_model_len // 17)


def prompt_classes(max_model_len: int, budget: int | None = None) -> tuple[int, ...]:
    budget = default_budget(max_model_len) if budget is None else budget
    longest = max_model_len - budget
    return tuple(sorted({max(1, round(longest * f)) for f in PROMPT_FRACTIONS}))


def mixed(n: int, *, max_model_len: int, vocab_size: int, seed: int = 0,
          budget: int | None = None) -> list[WorkItem]:
    """The write-up's mixed draw: prompt lengths uniform over the classes, budgets mostly full."""
    budget = default_budget(max_model_len) if budget is None else budget
    classes = prompt_classes(max_model_len, budget)
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        length = int(rng.choice(classes))
        tokens = _budget(rng, budget)
        items.append(WorkItem(_prompt(rng, length, vocab_size), tokens))
    return items


def _budget(rng: np.random.Generator, budget: int) -> int:
    if rng.random() < FULL_BUDGET_P:
        return budget
    return max(1, round(budget * float(rng.choice(SMALL_BUDGET_FRACTIONS))))


def admissions(per_class: int, *, max_model_len: int, vocab_size: int, slots: int,
               seed: int = 0, budget: int | None = None) -> list[WorkItem]:
    """The admission-disturbance draw: first `slots` short requests whose budgets end one
    after another (they fill the batch, so nothing below is admitted into an empty one, and
    they free slots singly), then `per_class` requests of every prompt-length class, budgets
    as in `mixed`, shuffled. Served closed, each class is admitted into a running batch about
    `per_class` times."""
    budget = default_budget(max_model_len) if budget is None else budget
    rng = np.random.default_rng(seed)
    classes = prompt_classes(max_model_len, budget)
    fill = [WorkItem(_prompt(rng, classes[0], vocab_size), max(1, budget * (i + 1) // slots))
            for i in range(slots)]
    lengths = [length for length in classes for _ in range(per_class)]
    rng.shuffle(lengths)
    return fill + [WorkItem(_prompt(rng, length, vocab_size), _budget(rng, budget))
                   for length in lengths]


def uniform(n: int, *, prompt_len: int, max_tokens: int, vocab_size: int,
            seed: int = 0) -> list[WorkItem]:
    """n requests of one shape: the write-up's uniform-batch controls (docs/references.md)."""
    rng = np.random.default_rng(seed)
    return [WorkItem(_prompt(rng, prompt_len, vocab_size), max_tokens) for _ in range(n)]


def closed_mix(*, vocab_size: int, seed: int = 0, n: int = 32,
               prompt_range: tuple[int, int] = (4, 256),
               budget_range: tuple[int, int] = (1, 64)) -> list[WorkItem]:
    """The foundation issue's closed mixed batch: 32 requests, prompts 4-256, budgets 1-64."""
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        length = int(rng.integers(prompt_range[0], prompt_range[1] + 1))
        tokens = int(rng.integers(budget_range[0], budget_range[1] + 1))
        items.append(WorkItem(_prompt(rng, length, vocab_size), tokens))
    return items


def describe(items: Sequence[WorkItem]) -> str:
    prompts = [item.prompt_len for item in items]
    budgets = [item.max_tokens for item in items]
    return (f"{len(items)} requests, prompts {min(prompts)}-{max(prompts)} "
            f"(mean {np.mean(prompts):.0f}), budgets {min(budgets)}-{max(budgets)} "
            f"(mean {np.mean(budgets):.0f})")
