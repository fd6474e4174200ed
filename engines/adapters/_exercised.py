"""What a third-party engine actually did under a run: the counters behind "passed".

A suite run that never preempted, chunked or hit the prefix cache says nothing about those
features, so each adapter counts them from the library's own scheduler state:

- `preemptions`: times a running request lost its KV and went back to the queue;
- `chunked_prompts`: requests whose prefill (or re-prefill after a preemption) took more than
  one step;
- `prefix_cache_hit_tokens`: prompt tokens whose KV came from the prefix cache.

A counter the library cannot give is absent, never zero. Each adapter's `exercised()` returns
its own counts; every adapter also adds them, under its factory's name, to one process-wide
tally. With `BATCHING_ENGINES_EXERCISED=path` set, the tally is written there as JSON when the
process exits (ci/test-third-party.sh prints it after each suite run).
"""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter

__all__ = ["COUNTERS", "Tally", "totals"]

COUNTERS = ("preemptions", "chunked_prompts", "prefix_cache_hit_tokens")
_ENV = "BATCHING_ENGINES_EXERCISED"
_TOTALS: dict[str, Counter[str]] = {}


class Tally:
    """One engine's counters, mirrored into the process-wide tally under `label`."""

    def __init__(self, label: str, counters: tuple[str, ...] = COUNTERS) -> None:
        self.label = label
        self.counts: Counter[str] = Counter(dict.fromkeys(counters, 0))
        self._total = _TOTALS.setdefault(label, Counter())
        for name in counters:
            self._total[name] += 0  # listed in the totals even if it stays zero

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] += n
            self._total[name] += n

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


def totals() -> dict[str, dict[str, int]]:
    """Every label's counts so far in this process."""
    return {label: dict(counts) for label, counts in _TOTALS.items()}


@atexit.register
def _dump() -> None:
    path = os.environ.get(_ENV)
    if path and _TOTALS:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(totals(), f, indent=1, sort_keys=True)
