"""The admission disturbance: what admitting a prompt costs the requests already running.

Many requests of every prompt-length class through few slots, every token timed (the serving
series' continuous-batching part, docs/references.md: 46 ms baseline, 690 ms, 15x, when a
4096-token prompt joins). An incumbent's gap in step k is the time between its tokens from
steps k-1 and k (it was running in both). One sample is one step: the median gap of its
incumbents. Steps that admitted nobody give the baseline; steps that admitted someone are
grouped by the longest prompt they admitted, and each group's median gap is reported as a
ratio to the baseline, with a bootstrap confidence interval over steps (both medians
resampled). `draws.admissions` gives every class enough admissions for MIN_SAMPLES samples.

An engine that never admits while others run (static batching) has no such steps: its spike
ratio is NaN, because its cost of admission is paid as queue wait instead.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engines.bench.metrics import steps_frame, tokens_frame
from engines.bench.replay import Run

MIN_SAMPLES = 5
CONFIDENCE = 0.95
BOOTSTRAP = 2000


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


def step_gaps(run: Run) -> pd.DataFrame:
    """One row per step that had incumbents: its median incumbent gap and what it admitted."""
    return (incumbent_gaps(run)
            .groupby("step", as_index=False)
            .agg(gap_s=("gap_s", "median"), n_admitted=("n_admitted", "first"),
                 admitted_prompt_len=("admitted_prompt_len", "first")))


def _median_ci(busy: np.ndarray, quiet: np.ndarray,
               rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap CI of median(busy) / median(quiet)."""
    b = np.median(busy[rng.integers(0, len(busy), (BOOTSTRAP, len(busy)))], axis=1)
    q = np.median(quiet[rng.integers(0, len(quiet), (BOOTSTRAP, len(quiet)))], axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(b / q, [tail, 100 - tail])
    return float(low), float(high)


def spikes(run: Run, *, seed: int = 0) -> tuple[float, pd.DataFrame]:
    """(baseline gap, one row per admitted prompt length: samples (steps), the median gap,
    its ratio to the baseline and the ratio's confidence interval)."""
    gaps = step_gaps(run)
    quiet = gaps.loc[gaps["n_admitted"] == 0, "gap_s"].to_numpy()
    baseline = float(np.median(quiet)) if len(quiet) else float("nan")
    rng = np.random.default_rng(seed)
    rows = []
    busy = gaps[gaps["n_admitted"] > 0]
    for length, group in busy.groupby("admitted_prompt_len"):
        values = group["gap_s"].to_numpy()
        low, high = _median_ci(values, quiet, rng) if len(quiet) else (np.nan, np.nan)
        rows.append({"engine": run.engine, "admitted_prompt_len": int(length),
                     "steps": len(values), "median_gap_s": float(np.median(values)),
                     "max_gap_s": float(values.max()),
                     "ratio": float(np.median(values)) / baseline,
                     "ci_low": low, "ci_high": high, "baseline_gap_s": baseline,
                     "baseline_steps": len(quiet)})
    columns = ["engine", "admitted_prompt_len", "steps", "median_gap_s", "max_gap_s", "ratio",
               "ci_low", "ci_high", "baseline_gap_s", "baseline_steps"]
    return baseline, pd.DataFrame(rows, columns=columns)


def headline(table: pd.DataFrame) -> dict[str, float]:
    """The row for the longest prompt admitted: ratio, its CI, samples, prompt length."""
    if table.empty:
        nan = float("nan")
        return {"ratio": nan, "ci_low": nan, "ci_high": nan, "steps": 0, "prompt_len": nan}
    row = table.sort_values("admitted_prompt_len").iloc[-1]
    return {"ratio": float(row["ratio"]), "ci_low": float(row["ci_low"]),
            "ci_high": float(row["ci_high"]), "steps": int(row["steps"]),
            "prompt_len": float(row["admitted_prompt_len"])}


def headline_samples(run: Run) -> list[float]:
    """Per step that admitted the longest prompt: its gap / the baseline (asv's samples)."""
    gaps = step_gaps(run)
    quiet = gaps.loc[gaps["n_admitted"] == 0, "gap_s"]
    busy = gaps[gaps["n_admitted"] > 0]
    if busy.empty or quiet.empty:
        return []
    longest = busy["admitted_prompt_len"].max()
    ratios = busy.loc[busy["admitted_prompt_len"] == longest, "gap_s"] / quiet.median()
    return [float(r) for r in ratios]

