"""The properties (docs/architecture.md describes each), each a function judging one Trace.

A property raises Violation with a sentence naming the request, the step, what was expected
and what was observed; the suite appends the runnable script.
"""

from __future__ import annotations

from collections.abc import Callable

from engines.testing.properties.base import Judge, Violation
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
from engines.testing.recorder import Trace

__all__ = [
    "PROPERTIES",
    "Judge",
    "Violation",
    "check_bad_input",
    "check_budget_finish",
    "check_compaction",
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

Check = Callable[[Trace, Judge], None]
PROPERTIES: dict[str, Check] = {
    "parity": check_parity,
    "reference_parity": check_reference_parity,
    "prefill_decode": check_prefill_decode,
    "variants": check_variants,
    "seeds": check_seeds,
    "token_range": check_token_range,
    "budget_finish": check_budget_finish,
    "liveness": check_liveness,
    "bad_input": check_bad_input,
    "compaction": check_compaction,
    "slot_lengths": check_slot_lengths,
    "zero_waste": check_zero_waste,
    "work_conservation": check_work_conservation,
    "kv_accounting": check_kv_accounting,
}
