"""The summary a person reads: one row per figure, one column per engine, the winner of each
row and by how much it beats every other engine.

Engines within TIE (5%) of the best value share a row's win: a latency percentile of one
engine moves by a few percent between two runs of the same bench (scripts/bench_stability.sh),
so a 1.03x lead is not a result that a second run would repeat. Capacity and goodput
(SEARCH_ROWS) tie within the run's own `search_tie` (summary.csv; engines.bench.config): a
search's figure is a bracket's low end, and where it lands depends on a few probes' verdicts
near the boundary, so its run-to-run spread is the searches' size, not the bracket's width. An
engine that shares a win only through that wider tie keeps its ratio in the table, marked.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from engines.bench.record import COLUMN

Better = Literal["higher", "lower"]

# summary column (engines.bench.record.Summary) -> (label, which way is better; None: shown,
# not a contest)
ROWS: dict[str, tuple[str, Better | None]] = {
    COLUMN.goodput_rps: ("goodput req/s (SLO)", "higher"),
    COLUMN.capacity_rps: ("capacity req/s", "higher"),
    COLUMN.output_tokens_per_s: ("tok/s, closed batch", "higher"),
    COLUMN.ttft_p95_s: ("TTFT p95 s @ reference", "lower"),
    # The mean, not the p50 (still in summary.csv): paged's waits are thin around their median
    # (its 45th to 55th percentiles span 1.0-1.9 ms: admission under a token budget), so 800
    # reference requests pin the p50 to +-13-15% (bootstrap) and its ratio over continuous's
    # moved 2.57-3.29x between four quick runs; the mean's ratio moved 4.79-4.96x. The mean
    # also carries the tail of waits (paged's p90: 12 ms) that the median hides.
    COLUMN.queue_wait_mean_s: ("queue wait mean s @ ref.", "lower"),
    COLUMN.itl_p50_s: ("ITL p50 s @ reference", "lower"),
    COLUMN.itl_spike_ratio: ("ITL spike x (admission)", "lower"),
    COLUMN.wasted_slot_steps: ("wasted slot-steps", "lower"),
    COLUMN.reference_rps: ("reference rate req/s", None),
    COLUMN.driver_overhead_pct: ("harness overhead %", None),
}
TIE = 1.05
SEARCH_ROWS = (COLUMN.goodput_rps, COLUMN.capacity_rps)


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


def tie_for(summary: pd.DataFrame, column: str) -> float:
    """The factor within which engines share `column`'s win: the run's search_tie for the
    search rows (TIE where an older summary.csv has none), TIE for the others."""
    if column in SEARCH_ROWS and COLUMN.search_tie in summary:
        given = pd.to_numeric(summary[COLUMN.search_tie], errors="coerce").dropna()
        if len(given):
            return float(given.iloc[0])
    return TIE


def _top(values: pd.Series, better: Better) -> float:
    valid = values.dropna()
    return float(valid.max() if better == "higher" else valid.min())


def contest(values: pd.Series, better: Better,
            tie: float = TIE) -> tuple[list[str], dict[str, float]]:
    """(the winners, {every other engine: the best value's factor over it}) among the engines
    with a value. Winners: the best, and every engine within `tie` of it. An engine at zero
    where the best is zero (no waste) ties; a factor over zero is nan."""
    valid = values.dropna()
    top = _top(values, better)
    won, beaten = [], {}
    for engine, value in valid.items():
        factor = _factor(top, float(value), better)
        if value == top or factor <= tie:
            won.append(str(engine))
        else:
            beaten[str(engine)] = factor
    return won, beaten


def winners(summary: pd.DataFrame) -> pd.DataFrame:
    """Rows of ROWS present in `summary`: each engine's value, the winner(s), and the best
    value's ratio over each other engine (an engine without a value takes no part)."""
    by_engine = summary.set_index(COLUMN.engine)
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
            tie = tie_for(summary, column)
            won, beaten = contest(values, better, tie)
            ratios = [f"{'n/a' if np.isnan(f) else f'{f:.2f}x'} {engine}"
                      for engine, f in beaten.items()]
            # A lead the wider tie absorbed is still a measured ratio: shown, marked as a tie.
            top = _top(values, better)
            ratios += [f"{f:.2f}x {engine} (tie: < {tie:g}x)" for engine in won
                       if (f := _factor(top, float(values[engine]), better)) > TIE]
            row.update(winner=", ".join(won) if beaten else "tie", ratio=", ".join(ratios))
        rows.append(row)
    return pd.DataFrame(rows)


def format_table(summary: pd.DataFrame) -> str:
    return winners(summary).to_string(index=False)


def listing(frame: pd.DataFrame) -> str:
    """A table as it is, every value through `fmt` (the closed and replay runs' tables)."""
    return frame.to_string(index=False, formatters=dict.fromkeys(frame.columns, fmt))
