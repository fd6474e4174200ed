"""PNG figures. Against the arrival rate: achieved rate and latency (rate.png), SLO attainment
and the latencies the SLO judges, with its targets drawn in (goodput.png). Over time: which
request held each slot at each step (slot_timeline.png), and incumbents' inter-token latency
in the steps around a long prompt's admission (itl_timeline.png)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engines.bench.disturbance import step_gaps
from engines.bench.record import COLUMN
from engines.bench.replay import Run
from engines.bench.slo import SLO

PREFILL = "0.6"  # grey: the step that admitted the request and prefilled its prompt
WASTE = "tab:red"  # a slot computed for a request that had already finished
WINDOW = 12  # steps shown either side of the admission


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path


def _by_engine(probes: pd.DataFrame, best: str, ascending: bool) -> Any:
    """One probe per engine and rate: the try the verdict rests on (a rate passes if any of
    its paired tries did), i.e. the one with the best `best` value."""
    tries = probes.sort_values(best, ascending=ascending, na_position="last")
    chosen = tries.drop_duplicates([COLUMN.engine, COLUMN.offered_rps])
    return chosen.sort_values(COLUMN.offered_rps).groupby(COLUMN.engine, sort=False)


def rate_plot(probes: pd.DataFrame, path: str | Path) -> Path:
    """probes: one row per probe (engines.bench.record.ProbeRow's columns)."""
    plt = pyplot()
    fig, (ax_rate, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = float(probes[COLUMN.offered_rps].max()) * 1.05
    ax_rate.plot([0, top], [0, top], color="0.7", linestyle=":", label="achieved = offered")
    for engine, all_probes in _by_engine(probes, COLUMN.growth, ascending=True):
        # A probe the driver gave up on measured only the requests admitted before it
        # stopped: its latencies are truncated, so it is marked, not joined to the curves.
        gave_up = all_probes[COLUMN.gave_up].astype(bool)
        df = all_probes[~gave_up]
        line, = ax_rate.plot(df[COLUMN.offered_rps], df[COLUMN.achieved_rps], marker="o",
                             label=engine)
        color = line.get_color()
        if gave_up.any():
            ax_rate.scatter(all_probes.loc[gave_up, COLUMN.offered_rps],
                            all_probes.loc[gave_up, COLUMN.achieved_rps], marker="x",
                            color=color, label=f"{engine}: gave up (queue ran away)")
        ax_lat.plot(df[COLUMN.offered_rps], df[COLUMN.ttft_p95_s], marker="o", color=color,
                    label=f"{engine} TTFT p95")
        ax_lat.plot(df[COLUMN.offered_rps], df[COLUMN.queue_wait_p50_s], marker="s",
                    linestyle="--", color=color, label=f"{engine} queue wait p50")
    ax_rate.set(xlabel="arrival rate (req/s)", ylabel="achieved rate (req/s)",
                title="Achieved vs offered rate")
    ax_lat.set(xlabel="arrival rate (req/s)", ylabel="seconds", yscale="log",
               title="Latency vs arrival rate")
    for ax in (ax_rate, ax_lat):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save(fig, path)


def goodput_plot(probes: pd.DataFrame, slo: SLO, goodput: dict[str, float],
                 path: str | Path) -> Path:
    """Left: share of requests within the SLO against the rate, the attainment target as a
    line and each engine's goodput capacity marked. Right: TTFT p90 and mean-ITL p90 against
    the rate, with the two targets as lines. Probes of both searches, best try per rate."""
    plt = pyplot()
    fig, (ax_att, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_att.axhline(slo.attainment, color="k", linestyle="--", linewidth=1,
                   label=f"SLO: {slo.attainment:.0%} of requests")
    ax_lat.axhline(slo.ttft_s, color="k", linestyle="--", linewidth=1,
                   label=f"TTFT target {slo.ttft_s * 1e3:.3g} ms")
    ax_lat.axhline(slo.itl_s, color="k", linestyle=":", linewidth=1,
                   label=f"ITL target {slo.itl_s * 1e3:.3g} ms")
    for engine, df in _by_engine(probes, COLUMN.slo_attained, ascending=False):
        line, = ax_att.plot(df[COLUMN.offered_rps], df[COLUMN.slo_attained], marker="o",
                            label=engine)
        color = line.get_color()
        if goodput.get(str(engine), 0) > 0:
            ax_att.axvline(goodput[str(engine)], color=color, linestyle=":", linewidth=1,
                           label=f"{engine} goodput {goodput[str(engine)]:.3g} req/s")
        ax_lat.plot(df[COLUMN.offered_rps], df[COLUMN.ttft_p90_s], marker="o", color=color,
                    label=f"{engine} TTFT p90")
        ax_lat.plot(df[COLUMN.offered_rps], df[COLUMN.itl_mean_p90_s], marker="s",
                    linestyle="--",
                    color=color, label=f"{engine} mean ITL p90")
    ax_att.set(xlabel="arrival rate (req/s)", ylabel="share of requests within SLO",
               ylim=(-0.02, 1.02), title="Goodput: SLO attainment vs arrival rate")
    ax_lat.set(xlabel="arrival rate (req/s)", ylabel="seconds", yscale="log",
               title="What the SLO judges")
    for ax in (ax_att, ax_lat):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)


def slot_timeline(runs: Sequence[Run], path: str | Path) -> Path:
    """One panel per run: which request held each slot at each step, from slot tables."""
    plt = pyplot()
    runs = [r for r in runs if r.steps and r.steps[0].slots is not None]
    if not runs:
        raise ValueError("slot_timeline: no run recorded slot tables (engine lacks slot_table)")
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.2 + 0.45 * max(
        len(r.steps[0].slots or ()) for r in runs) * len(runs)), squeeze=False)
    # tab20 without its reds and greys, which mean waste and prefill here.
    palette = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (6, 7, 14, 15)]
    for ax, run in zip(axes[:, 0], runs, strict=True):
        first = {rid: steps[0] for rid, steps in run.token_steps.items() if steps}
        last = {rid: steps[-1] for rid, steps in run.token_steps.items() if steps}
        order = {rid: i for i, rid in enumerate(run.token_steps)}
        n_slots = len(run.steps[0].slots or ())
        for k, step in enumerate(run.steps):
            width = step.end_s - step.start_s
            for slot, rid in enumerate(step.slots or ()):
                if rid is None:
                    continue
                rid = str(rid)
                if first.get(rid) == k:
                    color = PREFILL
                elif k > last.get(rid, k):
                    color = WASTE
                else:
                    color = palette[order.get(rid, 0) % len(palette)]
                ax.broken_barh([(step.start_s, width)], (slot - 0.4, 0.8), facecolors=color)
        ax.set(yticks=range(n_slots), ylabel="slot", xlabel="seconds", ylim=(n_slots - 0.5, -0.5),
               title=f"{run.engine}: {len(run.trace)} requests through {n_slots} slots "
                     "(grey: prefill step, red: finished but still computed)")
    return save(fig, path)


def itl_timeline(runs: Sequence[Run], path: str | Path) -> Path:
    """One panel per engine: the median gap of the running requests' tokens in each step
    around the admission of the longest prompt class (the admission whose stall is the
    median of that class), with the baseline gap as a line."""
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.6 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        gaps = step_gaps(run)
        quiet = gaps.loc[gaps["n_admitted"] == 0, "gap_s"]
        busy = gaps[gaps["n_admitted"] > 0]
        if busy.empty or quiet.empty:
            ax.text(0.5, 0.5, f"{run.engine}: no request was admitted while others decoded "
                    "(admission costs queue wait instead)", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_axis_off()
            continue
        longest = busy["admitted_prompt_len"].max()
        cls = busy[busy["admitted_prompt_len"] == longest].sort_values("gap_s")
        at = int(cls["step"].iloc[len(cls) // 2])
        near = gaps[(gaps["step"] >= at - WINDOW) & (gaps["step"] <= at + WINDOW)]
        colors = np.where(near["n_admitted"] == 0, "tab:blue",
                          np.where(near["admitted_prompt_len"] == longest, "tab:red",
                                   "tab:orange"))
        ax.bar(near["step"] - at, near["gap_s"] * 1e3, color=colors, width=0.8)
        baseline = float(quiet.median())
        ax.axhline(baseline * 1e3, color="k", linestyle="--", linewidth=1,
                   label=f"baseline {baseline * 1e3:.3g} ms")
        stall = float(cls["gap_s"].iloc[len(cls) // 2])
        ax.set(xlabel="steps from the admission", ylabel="incumbents' ITL (ms)",
               title=f"{run.engine}: a {int(longest)}-token prompt joins at step 0: "
                     f"{stall * 1e3:.3g} ms, {stall / baseline:.1f}x baseline "
                     "(red: that admission, orange: shorter ones, blue: none)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    return save(fig, path)
