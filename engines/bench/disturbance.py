"""The admission disturbance: what admitting a prompt costs the requests already running.

Many mixed requests through few slots, every token timed. An incumbent's gap in step k is the
time between its tokens from steps k-1 and k (it was running in both). Steps that admitted
nobody give the baseline gap; steps that admitted someone are grouped by the longest prompt
they admitted, and each group's median incumbent gap is reported as a ratio to the baseline
(the serving series' continuous-batching part, docs/references.md: 46 ms baseline, 690 ms,
15x, when a 4096-token prompt joins).

An engine that never admits while others run (static batching) has no such steps: its spike
ratio is NaN, because its cost of admission is paid as queue wait instead.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engines.bench.metrics import steps_frame, tokens_frame
from engines.bench.replay import Run


def incumbent_gaps(run: Run) -> pd.DataFrame:
    """One row per incumbent token: its step, gap, and what that step admitted."""
    tokens = tokens_frame(run)
    prev_step = tokens.groupby("request_id")["step"].shift(1)
    incumbents = tokens[(tokens["index"] > 0) & (prev_step == tokens["step"] - 1)]
    steps = steps_frame(run).set_index("step")
    return pd.DataFrame({
        "step": incumbents["step"].to_numpy(),
        "gap_s": incumbents["itl_s"].to_numpy(),
        "n_admitted": steps.loc[incumbents["step"], "n_admitted"].to_numpy(),
        "admitted_prompt_len": steps.loc[incumbents["step"], "admitted_max_prompt"].to_numpy(),
    })


def spikes(run: Run) -> tuple[float, pd.DataFrame]:
    """(baseline gap, table by admitted prompt length with the median gap and its ratio)."""
    gaps = incumbent_gaps(run)
    quiet = gaps[gaps["n_admitted"] == 0]
    baseline = float(quiet["gap_s"].median()) if len(quiet) else float("nan")
    busy = gaps[gaps["n_admitted"] > 0]
    table = (busy.groupby("admitted_prompt_len")
             .agg(steps=("step", "nunique"), median_gap_s=("gap_s", "median"),
                  max_gap_s=("gap_s", "max"))
             .reset_index())
    table["ratio"] = table["median_gap_s"] / baseline
    table.insert(0, "engine", run.engine)
    table["baseline_gap_s"] = baseline
    return baseline, table


def spike_ratio(table: pd.DataFrame) -> float:
    """The headline: the ratio in steps that admitted the longest prompt seen admitted."""
    if table.empty:
        return float("nan")
    return float(table.sort_values("admitted_prompt_len")["ratio"].iloc[-1])


def count_spikes(run: Run, factor: float = 3.0) -> int:
    """Distinct steps where an incumbent's gap exceeded `factor` x the baseline gap."""
    baseline, _ = spikes(run)
    gaps = incumbent_gaps(run)
    return int(np.unique(gaps.loc[gaps["gap_s"] > factor * baseline, "step"]).size)
