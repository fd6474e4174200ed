"""The summary a person reads: one row per figure, one column per engine, the winner of each
row and by how much it beats every other engine.

Engines within TIE (5%) of the best value share a row's win: capacity and goodput are brackets
2-4% wide (the searches' last bisection steps), and a latency percentile of one engine moves
by a few percent between two runs of the same bench (scripts/bench_stability.sh), so a 1.03x
lead is not a result that a second run would repeat.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

Better = Literal["higher", "lower"]

# summary column -> (label, which way is better; None: shown, not a contest)
ROWS: dict[str, tuple[str, Better | None]] = {
    "goodput_rps": ("goodput req/s (SLO)", "higher"),
    "capacity_rps": ("capacity req/s", "higher"),
    "output_tokens_per_s": ("tok/s, closed batch", "higher"),
    "ttft_p95_s": ("TTFT p95 s @ reference", "lower"),
    # The mean, not the p50 (still in summary.csv): paged's waits are thin around their median
    # (its 45th to 55th percentiles span 1.0-1.9 ms: admission under a token budget), so 800
    # reference requests pin the p50 to +-13-15% (bootstrap) and its ratio over continuous's
    # moved 2.57-3.29x between four quick runs; the mean's ratio moved 4.79-4.96x. The mean
    # also carries the tail of waits (paged's p90: 12 ms) that the median hides.
    "queue_wait_mean_s": ("queue wait mean s @ ref.", "lower"),
    "itl_p50_s": ("ITL p50 s @ reference", "lower"),
    "itl_spike_ratio": ("ITL spike x (admission)", "lower"),
    "wasted_slot_steps": ("wasted slot-steps", "lower"),
    "reference_rps": ("reference rate req/s", None),
    "driver_overhead_pct": ("harness overhead %", None),
}
TIE = 1.05


def fmt(value: object) -> str:
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "n/a"
    if isinstance(value, float | np.floating):
        return f"{value:.4g}"
    return str(value)


def _factor(top: float, other: float, better: Better) -> float:
    """How many times better `top` is than `other` (nan where either is not > 0)."""
    if top <= 0 or other <= 0 or not np.isfinite(top) or not np.isfinite(other):
        return float("nan")
    return top / other if better == "higher" else other / top


def contest(values: pd.Series, better: Better) -> tuple[list[str], dict[str, float]]:
    """(the winners, {every other engine: the best value's factor over it}) among the engines
    with a value. Winners: the best, and every engine within TIE of it. An engine at zero
    where the best is zero (no waste) ties; a factor over zero is nan."""
    valid = values.dropna()
    top = float(valid.max() if better == "higher" else valid.min())
    won, beaten = [], {}
    for engine, value in valid.items():
        factor = _factor(top, float(value), better)
        if value == top or factor <= TIE:
            won.append(str(engine))
        else:
            beaten[str(engine)] = factor
    return won, beaten


def winners(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of ROWS present in `summary`: each engine's value, the winner(s), and the best
    value's ratio over each other engine (an engine without a value takes no part)."""
    by_engine = summary.set_index("engine")
    rows = []
    for column, (label, better) in ROWS.items():
        if column not in by_engine:
            continue
        values = pd.to_numeric(by_engine[column], errors="coerce")
        row: dict[str, str] = {"figure": label}
        row.update({str(engine): fmt(v) for engine, v in values.items()})
        if better is None or values.notna().sum() < 2:
            row.update(winner="", ratio="")
        else:
            won, beaten = contest(values, better)
            if not beaten:
                row.update(winner="tie", ratio="")
            else:
                row.update(winner=", ".join(won), ratio=", ".join(
                    f"{'n/a' if np.isnan(f) else f'{f:.2f}x'} {engine}"
                    for engine, f in beaten.items()))
        rows.append(row)
    return pd.DataFrame(rows)


def format_table(summary: pd.DataFrame) -> str:
    return winners(summary).to_string(index=False)
