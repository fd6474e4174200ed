"""low_temperature: its planted bugs caught (a small temperature served at 1.0, a floor of
0.1), each only by this check; our engines pass beside the reference; the bound it forgives
within."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from engines.protocol import Capabilities
from engines.testing.checks.low_temperature import ALPHA, drawable_gap
from engines.testing.features.low_temperature import TEMPERATURES, drawn_temperatures
from engines.testing.search import drawing_of
from engines.testing.seed_workloads import seed_workloads
from engines.testing.untestable import untestable
from tests.planted import expect
from tests.planted.catalog import name_of
from tests.planted.harness import context_of, hunt, pinned
from tests.planted.sampler import SamplerEngine
from tests.planted.temperature_bugs import (
    TEMPERATURE_PLANTED,
    FlooredAtOneHundredth,
    TemperatureFloor,
)

CHECK = "low_temperature"


@pytest.mark.parametrize("bug", TEMPERATURE_PLANTED, ids=name_of)
def test_low_temperature_catches_a_temperature_served_at_another(bug: Any) -> None:
    caught = hunt(bug, settings=pinned(10))
    assert caught is not None and caught.prop == bug.caught_by == CHECK, caught
    assert "at temperature" in str(caught) and "below the most likely token" in str(caught)


@pytest.mark.parametrize("bug", TEMPERATURE_PLANTED, ids=name_of)
def test_no_other_sampling_check_sees_it(bug: Any) -> None:
    # The checks that judge sampled requests draw temperatures of 0.7 to 1.5: unchanged there.
    for check in ("greedy_filters", "sampling_distribution"):
        assert hunt(bug, settings=pinned(5), check=check) is None, check


@pytest.mark.parametrize("engine", [SamplerEngine, FlooredAtOneHundredth], ids=name_of)
def test_a_correct_engine_passes(engine: Any) -> None:
    expect.passes_beside_the_reference(engine, CHECK, pinned(30), "correct")


def test_the_bound_forgives_what_a_draw_can_give() -> None:
    # V = 512, k = 8: a gap of T * ln(V * k / ALPHA) is drawn with probability ALPHA / (V * k)
    # at most, per id and position, so ALPHA per request.
    t, v, k = 1e-3, 512, 8
    gap = drawable_gap(t, v, k, 0.0)
    assert math.isclose(v * k * math.exp(-gap / t), ALPHA, rel_tol=1e-9)
    assert drawable_gap(t, v, k, 0.125) == pytest.approx(gap + 0.125)
    # The widest the check forgives on the tiny presets, at 1e-2: a third of a nat.
    assert drawable_gap(max(TEMPERATURES), v, k, 1e-3) < 0.35


def test_a_declared_floor_is_not_drawn_below_and_is_said() -> None:
    ctx = context_of(FlooredAtOneHundredth)
    drawing = drawing_of(ctx, CHECK)
    assert drawn_temperatures(drawing) == (1e-2,)
    drawn = {r.params.temperature for w in seed_workloads(drawing, alone=ctx.oracle.tokens)
             for r in w.requests}
    assert 0 < min(t for t in drawn if t > 0) and not {t for t in drawn if 0 < t < 1e-2}
    assert any("min_temperature 0.01" in line for line in untestable(ctx))


@pytest.mark.parametrize("value", [-0.1, 2.0, True, "0.01"])
def test_a_bad_floor_is_refused_by_name(value: object) -> None:
    with pytest.raises(ValueError, match="min_temperature"):
        Capabilities(min_temperature=value)  # type: ignore[arg-type]


class _OtherModel(TemperatureFloor):
    """TemperatureFloor's draws on an engine that declares its model is not the reference's
    (as ctranslate2's converter dropping Llama-3 RoPE's field declares): the reference's
    logprobs do not bound what it draws from, so nothing is judged against them."""

    CAPABILITIES = dataclasses.replace(TemperatureFloor.CAPABILITIES, expected_failed_checks={
        "reference_parity": "its model is not the reference's"})


def test_no_judgment_against_a_reference_that_is_not_the_engines_model() -> None:
    ctx = context_of(_OtherModel)
    found = hunt(_OtherModel, settings=pinned(5), ctx=ctx)
    assert found is None, str(found)[:2000]
