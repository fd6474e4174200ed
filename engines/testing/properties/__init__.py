"""The properties (docs/architecture.md describes each), each a function judging one Trace.

A property raises Violation with a sentence naming the request, the step, what was expected
and what was observed; the suite appends the runnable script. Which check runs which property,
and everything else about a check, is in the registry (engines.testing.checks).
"""

from __future__ import annotations

from engines.testing.properties.base import Judge, Violation
from engines.testing.properties.drain import check_drain
from engines.testing.properties.kv import check_kv_accounting
from engines.testing.properties.parity import (
    check_parity,
    check_prefill_decode,
    check_reference_parity,
    check_variants,
)
from engines.testing.properties.requests import (
    check_bad_input,
    check_budget_finish,
    check_liveness,
    check_token_range,
)
from engines.testing.properties.seeds import check_seeds
from engines.testing.properties.slots import (
    check_compaction,
    check_slot_lengths,
    check_work_conservation,
    check_zero_waste,
)

__all__ = [
    "Judge",
    "Violation",
    "check_bad_input",
    "check_budget_finish",
    "check_compaction",
    "check_drain",
    "check_kv_accounting",
    "check_liveness",
    "check_parity",
    "check_prefill_decode",
    "check_reference_parity",
    "check_seeds",
    "check_slot_lengths",
    "check_token_range",
    "check_variants",
    "check_work_conservation",
    "check_zero_waste",
]
