from __future__ import annotations

import pytest
import torch

from engines.paged.engine import PagedEngine
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine

# The tiny model's ops are too small to split across threads; with xdist workers on every core,
# intra-op threads only contend (measured: a 0.7 s test took 30 s on a loaded 2-core machine).
torch.set_num_threads(1)

ENGINES = {
    "sequential": SequentialEngine,
    "static": StaticBatchEngine,
    "continuous": ContinuousBatchEngine,
    "paged": PagedEngine,
}


@pytest.fixture(params=sorted(ENGINES))
def engine_cls(request: pytest.FixtureRequest) -> type:
    return ENGINES[request.param]
