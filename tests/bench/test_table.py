"""The closing table: the winner of each figure and its ratio over every other engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engines.bench.table import format_table, winners


def test_winner_per_figure_respects_which_way_is_better() -> None:
    summary = pd.DataFrame({
        "engine": ["static", "continuous", "paged"],
        "goodput_rps": [10.0, 30.0, 25.0],
        "ttft_p95_s": [0.4, 0.1, 0.2],
        "itl_spike_ratio": [np.nan, 12.0, 3.0],
        "wasted_slot_steps": [300, 0, 0],
        "driver_overhead_pct": [1.0, 1.2, 1.1],
    })
    table = winners(summary).set_index("figure")
    goodput = table.loc["goodput req/s (SLO)"]
    assert goodput["winner"] == "continuous"
    assert goodput["ratio"] == "3.00x static, 1.20x paged"
    ttft = table.loc["TTFT p95 s @ reference"]
    assert ttft["winner"] == "continuous" and ttft["ratio"] == "4.00x static, 2.00x paged"
    # An engine without the figure (static never admits into a running batch) takes no part.
    spike = table.loc["ITL spike x (admission)"]
    assert spike["winner"] == "paged" and spike["ratio"] == "4.00x continuous"
    assert spike["static"] == "n/a"
    # Engines tied at the best value share the win; zero has no ratio; the harness's own
    # overhead is no contest.
    assert table.loc["wasted slot-steps", "winner"] == "continuous, paged"
    assert table.loc["wasted slot-steps", "ratio"] == "n/a static"
    assert table.loc["harness overhead %", "winner"] == ""


def test_ties_and_lone_engines_name_no_winner() -> None:
    summary = pd.DataFrame({"engine": ["a", "b"], "capacity_rps": [5.0, 5.0],
                            "itl_spike_ratio": [np.nan, 2.0]})
    table = winners(summary).set_index("figure")
    assert table.loc["capacity req/s", "winner"] == "tie"
    assert table.loc["ITL spike x (admission)", "winner"] == ""
    assert "capacity req/s" in format_table(summary)


def test_engines_within_five_percent_of_the_best_share_the_win() -> None:
    # A 1.03x lead is inside what two runs of one engine differ by; 1.10x is not.
    summary = pd.DataFrame({"engine": ["static", "continuous", "paged"],
                            "itl_p50_s": [0.00290, 0.00297, 0.00372],
                            "capacity_rps": [65.0, 97.0, 107.0]})
    table = winners(summary).set_index("figure")
    itl = table.loc["ITL p50 s @ reference"]
    assert itl["winner"] == "static, continuous" and itl["ratio"] == "1.28x paged"
    capacity = table.loc["capacity req/s"]
    assert capacity["winner"] == "paged" and capacity["ratio"] == "1.65x static, 1.10x continuous"
    all_close = pd.DataFrame({"engine": ["a", "b"], "capacity_rps": [100.0, 97.0]})
    assert winners(all_close).set_index("figure").loc["capacity req/s", "winner"] == "tie"


def test_capacity_and_goodput_tie_within_the_runs_own_search_tie() -> None:
    # --quick's searches move by up to 1.3x between runs (engines.bench.config): a 1.14x
    # capacity lead shares the win there and keeps its ratio, marked; latency rows keep 5%.
    summary = pd.DataFrame({"engine": ["static", "continuous", "paged"],
                            "capacity_rps": [150.0, 200.0, 228.0],
                            "goodput_rps": [60.0, 150.0, 210.0],
                            "itl_p50_s": [0.00290, 0.00297, 0.00372],
                            "search_tie": [1.3, 1.3, 1.3]})
    table = winners(summary).set_index("figure")
    capacity = table.loc["capacity req/s"]
    assert capacity["winner"] == "continuous, paged"
    assert capacity["ratio"] == "1.52x static, 1.14x continuous (tie: < 1.3x)"
    goodput = table.loc["goodput req/s (SLO)"]
    assert goodput["winner"] == "paged" and goodput["ratio"] == "3.50x static, 1.40x continuous"
    assert table.loc["ITL p50 s @ reference", "winner"] == "static, continuous"
    # The same figures from a full run (or an older summary.csv without the column): 5%.
    full = winners(summary.drop(columns="search_tie")).set_index("figure")
    assert full.loc["capacity req/s", "winner"] == "paged"
    assert full.loc["capacity req/s", "ratio"] == "1.52x static, 1.14x continuous"


def _stability_check() -> Any:
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_stability_check.py"
    spec = importlib.util.spec_from_file_location("bench_stability_check", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stability_check_judges_winners_by_the_tables_rule(tmp_path: Path) -> None:
    # Two quick runs whose paged-over-continuous capacity lead moved 1.04x -> 1.2x: one
    # winner under --quick's tie, as the bench's own table names it; two under 5%.
    check = _stability_check().check

    dirs = []
    for i, (continuous, paged, tie) in enumerate([(200.0, 208.0, 1.3), (200.0, 240.0, 1.3)]):
        run = tmp_path / f"run{i}"
        run.mkdir()
        pd.DataFrame({"engine": ["static", "continuous", "paged"],
                      "capacity_rps": [150.0, continuous, paged],
                      "search_tie": [tie] * 3}).to_csv(run / "summary.csv", index=False)
        dirs.append(run)
    assert check(dirs)
    for run in dirs:
        frame = pd.read_csv(run / "summary.csv").drop(columns="search_tie")
        frame.to_csv(run / "summary.csv", index=False)
    assert not check(dirs)


@pytest.mark.parametrize(("mixes", "past"), [((4.0, 4.4), False), ((3.85, 5.30), True)])
def test_the_stability_check_says_how_far_the_hosts_mix_moved(
        mixes: tuple[float, float], past: bool) -> None:
    # The spike moves with the host's prefill over decode step (engines.bench.comparison's
    # disturbance run): the check states that mix's spread and, past its tolerance, that the
    # host cannot repeat such figures; runs without it are named as unmeasured.
    module = _stability_check()
    frames = [pd.DataFrame({"engine": ["continuous"], "spike_host_prefill_x": [m]})
              for m in mixes]
    line = module._host_mix(frames)
    assert f"{min(mixes):.2f}-{max(mixes):.2f}x" in line
    assert ("this host cannot repeat" in line) == past
    assert "not measured" in module._host_mix([frames[0], pd.DataFrame({"engine": ["x"]})])
