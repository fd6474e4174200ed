"""PNG figures over time: which request held each slot at each step (slot_timeline.png), and
incumbents' inter-token latency in the steps around a long prompt's admission
(itl_timeline.png)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engines.bench.disturbance import step_gaps
from engines.bench.plots import pyplot, save
from engines.bench.replay import Run

PREFILL = "0.6"  # grey: the step that admitted the request and prefilled its prompt
WASTE = "tab:red"  # a slot computed for a request that had already finished
WINDOW = 12  # steps shown either side of the admission


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
