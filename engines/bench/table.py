"""The summary a person reads: one row per figure, one column per engine, the winner of each
row and by how much it beats every other engine."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

Better = Literal["higher", "lower"] | None

# summary column -> (label, which way is better; None: shown, not a contest)
ROWS: dict[str, tuple[str, Better]] = {
    "goodput_rps": ("goodput req/s (SLO)", "higher"),
    "capacity_rps": ("capacity req/s", "higher"),
    "output_tokens_per_s": ("tok/s, closed batch", "higher"),
    "ttft_p95_s": ("TTFT p95 s @ reference", "lower"),
    "queue_wait_p50_s": ("queue wait p50 s @ ref.", "lower"),
    "itl_p50_s": ("ITL p50 s @ reference", "lower"),
    "itl_spike_ratio": ("ITL spike x (admission)", "lower"),
    "wasted_slot_steps": ("wasted slot-steps", "lower"),
    "reference_rps": ("reference rate req/s", None),
    "driver_overhead_pct": ("harness overhead %", None),
}


def fmt(value: object) -> str:
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "n/a"
    if isinstance(value, float | np.floating):
        return f"{value:.4g}"
    return str(value)


def _ratio(winner: float, other: float, better: Better) -> str:
    if winner <= 0 or other <= 0 or not np.isfinite(winner) or not np.isfinite(other):
        return "n/a"
    return f"{winner / other if better == 'higher' else other / winner:.2f}x"


def winners(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of ROWS present in `summary`: each engine's value, the winner, and the winner's
    ratio over each other engine (an engine without a value takes no part)."""
    by_engine = summary.set_index("engine")
    rows = []
    for column, (label, better) in ROWS.items():
        if column not in by_engine:
            continue
        values = pd.to_numeric(by_engine[column], errors="coerce")
        row: dict[str, str] = {"figure": label}
        row.update({str(engine): fmt(v) for engine, v in values.items()})
        valid = values.dropna()
        if better is None or len(valid) < 2:
            row.update(winner="", ratio="")
        elif valid.nunique() == 1:
            row.update(winner="tie", ratio="")
        else:
            top = float(valid.max() if better == "higher" else valid.min())
            best = [str(engine) for engine, v in valid.items() if v == top]  # ties share it
            others = [f"{_ratio(top, float(v), better)} {engine}"
                      for engine, v in valid.items() if v != top]
            row.update(winner=", ".join(best), ratio=", ".join(others))
        rows.append(row)
    return pd.DataFrame(rows)


def format_table(summary: pd.DataFrame) -> str:
    return winners(summary).to_string(index=False)
