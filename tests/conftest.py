from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import settings

from engines.paged.engine import PagedEngine
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from engines.testing.profiles import suite_settings

# The tiny model's ops are too small to split across threads; with xdist workers on every core,
# intra-op threads only contend (measured: a 0.7 s test took 30 s on a loaded 2-core machine).
torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    # The repo's own Hypothesis tests outside the suite (engine_machine(...).TestCase, as a
    # third party writes one) run under the profile the suite's rule gives this run: the
    # ini key's batching-dev unless --hypothesis-profile (Hypothesis loads it) or
    # HYPOTHESIS_PROFILE says otherwise. Loaded here, in tests/, which only the repo's own test
    # runs import: never in the root conftest.py, which an editable install's suite runs import.
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile(suite_settings(config).name)


@pytest.fixture(autouse=True)
def hypothesis_state_restored() -> Iterator[None]:
    """What an in-process pytester run leaves in Hypothesis is undone after each test: its
    --hypothesis-seed stays in core.global_force_seed, and its --hypothesis-profile stays
    loaded, for every later test of this process (an xdist worker's), which then draws other
    examples than it does alone."""
    from hypothesis import core

    seed, profile = core.global_force_seed, settings.get_current_profile_name()
    yield
    core.global_force_seed = seed
    settings.load_profile(profile)


ENGINES = {
    "sequential": SequentialEngine,
    "static": StaticBatchEngine,
    "continuous": ContinuousBatchEngine,
    "paged": PagedEngine,
}


@pytest.fixture(params=sorted(ENGINES))
def engine_cls(request: pytest.FixtureRequest) -> type:
    return ENGINES[request.param]


@pytest.fixture
def launched() -> Iterator[None]:
    """Every server a test launched (engines.adapters.http.launch) is stopped after it: the
    finalizer a session relies on besides atexit."""
    yield
    from engines.adapters.http.launch import running, stop_all  # httpx: only where used

    stop_all()
    assert running() == []
