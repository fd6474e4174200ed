"""PNG figures: latency and achieved rate against arrival rate; a slot timeline per engine."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from engines.bench.replay import Run

PREFILL = "0.6"  # grey: the step that admitted the request and prefilled its prompt
WASTE = "tab:red"  # a slot computed for a request that had already finished


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    return plt


def rate_plot(probes: pd.DataFrame, path: str | Path) -> Path:
    """probes: one row per capacity probe (engine, offered_rps, achieved_rps, latencies)."""
    plt = _pyplot()
    fig, (ax_rate, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = float(probes["offered_rps"].max()) * 1.05
    ax_rate.plot([0, top], [0, top], color="0.7", linestyle=":", label="achieved = offered")
    for engine, all_probes in probes.sort_values("offered_rps").groupby("engine", sort=False):
        # A probe the driver gave up on measured only the requests admitted before it stopped:
        # its latencies are truncated, so it is marked, not joined to the curves.
        gave_up = all_probes["gave_up"].astype(bool)
        df = all_probes[~gave_up]
        line, = ax_rate.plot(df["offered_rps"], df["achieved_rps"], marker="o", label=engine)
        color = line.get_color()
        if gave_up.any():
            ax_rate.scatter(all_probes.loc[gave_up, "offered_rps"],
                            all_probes.loc[gave_up, "achieved_rps"], marker="x", color=color,
                            label=f"{engine}: gave up (queue ran away)")
        ax_lat.plot(df["offered_rps"], df["ttft_p95_s"], marker="o", color=color,
                    label=f"{engine} TTFT p95")
        ax_lat.plot(df["offered_rps"], df["queue_wait_p50_s"], marker="s", linestyle="--",
                    color=color, label=f"{engine} queue wait p50")
    ax_rate.set(xlabel="arrival rate (req/s)", ylabel="achieved rate (req/s)",
                title="Achieved vs offered rate")
    ax_lat.set(xlabel="arrival rate (req/s)", ylabel="seconds", yscale="log",
               title="Latency vs arrival rate")
    for ax in (ax_rate, ax_lat):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def slot_timeline(runs: Sequence[Run], path: str | Path) -> Path:
    """One panel per run: which request held each slot at each step, from slot tables."""
    plt = _pyplot()
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
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
