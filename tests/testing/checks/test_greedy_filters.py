"""greedy_filters: its planted bug caught (top_k ignored on a sampled request, where top_k=1
makes it greedy), a correct engine passing. The filters it recognises and the distribution
test it shares with sampling_distribution: test_sampling_distribution.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.planted import expect
from tests.planted.catalog import ALL_CONTROLS, name_of
from tests.planted.harness import hunt, pinned
from tests.planted.unseeded_bugs import TopKIgnored

CHECK = "greedy_filters"


def test_greedy_filters_catches_an_ignored_top_k() -> None:
    caught = hunt(TopKIgnored, settings=pinned(40))
    assert caught is not None and caught.prop == TopKIgnored.caught_by == CHECK, caught
    assert "top_k=1" in str(caught)


@pytest.mark.parametrize("control", ALL_CONTROLS, ids=name_of)
def test_a_correct_engine_passes(control: Any) -> None:
    expect.passes(control, CHECK, pinned(30))
