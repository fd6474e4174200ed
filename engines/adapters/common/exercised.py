"""What a third-party engine actually did under a run: the counters behind "passed".

A suite run that never preempted, chunked or hit the prefix cache says nothing about those
features, so each adapter counts them from the library's own scheduler state:

- `preemptions`: times a running request lost its KV and went back to the queue;
- `chunked_prompts`: requests whose prefill (or re-prefill after a preemption) took more than
  one step;
- `prefix_cache_hit_tokens`: prompt tokens whose KV came from the prefix cache.

A counter the library cannot give is absent, never zero. Each adapter's `exercised()`
(engines.protocol.Exercised) returns its counts; the conformance suite reports their change
over every workload in its summary.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["COUNTERS", "Tally"]

COUNTERS = ("preemptions", "chunked_prompts", "prefix_cache_hit_tokens")


class Tally:
    """One engine's counters."""

    def __init__(self, label: str, counters: tuple[str, ...] = COUNTERS) -> None:
        self.label = label
        self.counts: Counter[str] = Counter(dict.fromkeys(counters, 0))

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)
