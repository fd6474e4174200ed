"""Check that several `bench --quick` runs agree: every contested row of the summary table
(engines.bench.table.ROWS) names the same winner in every run, and each of the winner's
ratios over another engine stays within TOLERANCE (max / min over the runs <= 1.2).

    python scripts/bench_stability_check.py DIR [DIR ...]   # each DIR holds a summary.csv

Prints every run's table (as the bench prints it), its wall time and load when the run's log
(DIR.log, written by scripts/bench_stability.sh) has them, and how far the host's speed moved
under its reference run (reference_drift) and its prefill over its decode step over the
spikes' steps (spike_host_prefill_x), then one line per row. Exit
status 1 when a row's winner or ratios moved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from engines.bench.table import ROWS, Better, contest, format_table, tie_for

TOLERANCE = 1.2


def _ratios(summary: pd.DataFrame, column: str, better: Better) -> tuple[str, dict[str, float]]:
    """(winner, {other engine: the best value's ratio over it}) as the bench's table has them
    (engines.bench.table.contest: engines within the row's tie share a win); nan ratios
    dropped."""
    values = pd.to_numeric(summary.set_index("engine")[column], errors="coerce")
    if values.notna().sum() < 2:
        return "", {}
    won, beaten = contest(values, better, tie_for(summary, column))
    if not beaten:
        return "tie", {}
    return ", ".join(sorted(won)), {e: f for e, f in beaten.items() if not np.isnan(f)}


def check(dirs: list[Path]) -> bool:
    summaries = [pd.read_csv(d / "summary.csv") for d in dirs]
    for d, summary in zip(dirs, summaries, strict=True):
        log = d.with_name(d.name + ".log")
        lines = log.read_text().splitlines() if log.exists() else []
        print(f"=== {d}")
        print("\n".join(line for line in lines if line.startswith("==")))
        print(format_table(summary))
        if "reference_drift" in summary:  # the host's speed over the reference run
            print(f"reference drift: {summary['reference_drift'].iloc[0]:.2f}x")
        if "spike_host_prefill_x" in summary:  # the host's mix over the disturbance run
            print(f"host prefill/decode over the spikes' steps: "
                  f"{summary['spike_host_prefill_x'].iloc[0]:.2f}x")
        print()
    ok = True
    for column, (label, better) in ROWS.items():
        if better is None or any(column not in s for s in summaries):
            continue
        found = [_ratios(s, column, better) for s in summaries]
        winners = {w for w, _ in found}
        problems = []
        spread = []
        others: set[str] = set()
        if len(winners) > 1:
            problems.append(f"winners differ: {[w for w, _ in found]}")
        else:
            others = set().union(*(r.keys() for _, r in found))
        for other in sorted(others):
            values = [r.get(other, np.nan) for _, r in found]
            if any(np.isnan(values)):
                if not all(np.isnan(values)):
                    problems.append(f"ratio over {other} missing in some runs: {values}")
                continue
            factor = max(values) / min(values)
            spread.append(f"{other} {min(values):.2f}-{max(values):.2f}x")
            if factor > TOLERANCE:
                problems.append(f"ratio over {other} moved {factor:.2f}x (> {TOLERANCE})")
        verdict = "FAIL" if problems else "ok  "
        ok = ok and not problems
        print(f"{verdict} {label}: winner {' / '.join(sorted(winners))}; "
              f"{', '.join(spread) or 'no ratios'}" + "".join(f"; {p}" for p in problems))
    print(_host_mix(summaries))
    return ok


def _host_mix(summaries: list[pd.DataFrame]) -> str:
    """How far the host's prefill over decode step moved between the runs' disturbance runs:
    the spike moves with it, and no clock rescales it (scripts/host_steadiness.py). Said, not
    judged: the rows above are the verdict."""
    mixes = [float(s["spike_host_prefill_x"].iloc[0]) for s in summaries
             if "spike_host_prefill_x" in s]
    if len(mixes) < len(summaries) or any(np.isnan(mixes)):
        return "host mix: not measured in every run (targets given, or an older bench)"
    factor = max(mixes) / min(mixes)
    text = (f"host mix: the yardstick's prefill took {min(mixes):.2f}-{max(mixes):.2f}x its "
            f"decode step over the runs' spikes ({factor:.2f}x between runs)")
    if factor > TOLERANCE:
        text += (f"; past {TOLERANCE}x, this host cannot repeat a figure that weighs a "
                 "prefill against decode steps (the ITL spike first) within it")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    if len(args.dirs) < 2:
        parser.error("give at least two run directories")
    return 0 if check(args.dirs) else 1


if __name__ == "__main__":
    sys.exit(main())
