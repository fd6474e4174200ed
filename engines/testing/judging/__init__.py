"""The properties (docs/architecture.md describes each), each a function judging one Trace for
the check it is handed, one file per theme: parity, requests, seeds, logprobs,
prompt_logprobs, greedy_filters, unseeded_draws, sequence_draws, slots, kv, isolation (tenants:
block tables), isolation_counts (tenants: cached-token counts), tenant_isolation (both), drain.

A property raises `check.fail(...)` with a sentence naming the request, the step, what was
expected and what was observed; the suite appends the runnable script. Which check runs which
property, and everything else about a check, is in the registry (engines.testing.checks);
what a check adds to the coverage summary is its Tally, beside its property.
"""

from __future__ import annotations

from engines.testing.properties.base import Judge, Violation

__all__ = ["Judge", "Violation"]
