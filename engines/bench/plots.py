"""PNG figures against the arrival rate: achieved rate and latency (rate.png), SLO attainment
and the latencies the SLO judges, with its targets drawn in (goodput.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from engines.bench.slo import SLO


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
    chosen = tries.drop_duplicates(["engine", "offered_rps"])
    return chosen.sort_values("offered_rps").groupby("engine", sort=False)


def rate_plot(probes: pd.DataFrame, path: str | Path) -> Path:
    """probes: one row per probe (engine, offered_rps, achieved_rps, latencies, gave_up)."""
    plt = pyplot()
    fig, (ax_rate, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = float(probes["offered_rps"].max()) * 1.05
    ax_rate.plot([0, top], [0, top], color="0.7", linestyle=":", label="achieved = offered")
    for engine, all_probes in _by_engine(probes, "growth", ascending=True):
        # A probe the driver gave up on measured only the requests admitted before it
        # stopped: its latencies are truncated, so it is marked, not joined to the curves.
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
    for engine, df in _by_engine(probes, "slo_attained", ascending=False):
        line, = ax_att.plot(df["offered_rps"], df["slo_attained"], marker="o", label=engine)
        color = line.get_color()
        if goodput.get(str(engine), 0) > 0:
            ax_att.axvline(goodput[str(engine)], color=color, linestyle=":", linewidth=1,
                           label=f"{engine} goodput {goodput[str(engine)]:.3g} req/s")
        ax_lat.plot(df["offered_rps"], df["ttft_p90_s"], marker="o", color=color,
                    label=f"{engine} TTFT p90")
        ax_lat.plot(df["offered_rps"], df["itl_mean_p90_s"], marker="s", linestyle="--",
                    color=color, label=f"{engine} mean ITL p90")
    ax_att.set(xlabel="arrival rate (req/s)", ylabel="share of requests within SLO",
               ylim=(-0.02, 1.02), title="Goodput: SLO attainment vs arrival rate")
    ax_lat.set(xlabel="arrival rate (req/s)", ylabel="seconds", yscale="log",
               title="What the SLO judges")
    for ax in (ax_att, ax_lat):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, path)
