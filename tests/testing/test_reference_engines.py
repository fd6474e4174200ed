"""The conformance suite on the three reference engines, the way a third party runs it.

Small batches (3 slots) make slot reuse, "more requests than slots" and compaction happen in
every few-request example, which keeps the dev profile both fast and sharp.
"""

from __future__ import annotations

from functools import partial

from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from engines.testing.conformance import *  # noqa: F403

conformance_engines = {
    "SequentialEngine": SequentialEngine,
    "StaticBatchEngine": partial(StaticBatchEngine, max_batch_size=3),
    "ContinuousBatchEngine": partial(ContinuousBatchEngine, max_batch_size=3),
}
