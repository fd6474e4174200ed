"""One report per bench run: what every rendering reads, serialized as report.json.

Every subcommand that measures writes one (`kind`): `compare` (the winner table and its
closing lines, summary.csv and the probe, spike and closed-run CSVs, the rate and goodput
plots, asv's samples), `closed` (closed.csv) and `replay` (replay.csv, the rate plot). Each
rendering is made from this one object, built once from the measured runs; a saved report
renders the same table again (`python -m engines.bench render --out DIR`). What it does not
hold is raw data, saved beside it from the runs: the per-request and per-token records, the
traces, the timelines.

Version 2 added `kind`; a version-1 report (before it) is a comparison's and still loads.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engines.bench.metrics import write_csv
from engines.bench.record import COLUMN
from engines.bench.slo import SLO
from engines.bench.table import format_table, listing

VERSION = 2
READS = (1, VERSION)  # version 1: a comparison's report, before `kind`
FILE = "report.json"
FRAMES = ("probes", "spikes", "closed")  # the small CSV tables a comparison's carries
TABLE_FILE = {"compare": "summary.csv", "closed": "closed.csv", "replay": "replay.csv"}


def plain(value: Any) -> Any:
    """JSON-ready: numpy scalars and arrays as Python numbers and lists, NaN and inf kept
    (Python's json writes and reads them back)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return float("nan")
    return value


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [plain(row) for row in frame.to_dict(orient="records")]


@dataclass(slots=True)
class Report:
    config: dict[str, Any]  # engines.bench.config.Config's fields (replay: and its own)
    slo: dict[str, Any]  # compare: the headline targets (engines.bench.slo.SLO's fields)
    summary: list[dict[str, Any]]  # the table's rows, its CSV's columns (TABLE_FILE) in order
    notes: list[str]  # the closing lines under the table
    frames: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # compare: FRAMES
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # asv's
    goodput: dict[str, float] = field(default_factory=dict)  # each engine's, for the plot
    version: int = VERSION
    kind: str = "compare"  # the subcommand that measured it: a key of TABLE_FILE

    def __post_init__(self) -> None:
        if self.kind not in TABLE_FILE:
            raise ValueError(f"report kind: must be one of {', '.join(TABLE_FILE)}, "
                             f"got {self.kind!r}")

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary)

    def frame(self, name: str) -> pd.DataFrame:
        return pd.DataFrame(self.frames.get(name, []))

    def headline_slo(self) -> SLO:
        return SLO(**self.slo)

    def text(self) -> str:
        """What the run printed: its table (a comparison's: the winners), then the notes."""
        table = self.table()
        shown = format_table(table) if self.kind == "compare" else listing(table)
        return "\n".join([shown, *(["", *self.notes] if self.notes else [])])

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plain(asdict(self)), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> Report:
        data = json.loads(path.read_text())
        if data.get("version") not in READS:
            raise ValueError(f"{path}: report version {data.get('version')!r}, this bench "
                             f"reads {', '.join(map(str, READS))}")
        return cls(**{**data, "version": VERSION})


def render(found: Report, out: Path, *, plots: bool) -> None:
    """Everything that renders from a report into `out`: report.json itself, its table's CSV
    (TABLE_FILE) and a comparison's small CSV tables; the plots: a comparison's rate and
    goodput plots, a replay's rate plot over more than one rate."""
    found.save(out / FILE)
    write_csv(found.table(), out / TABLE_FILE[found.kind])
    for name in found.frames:
        write_csv(found.frame(name), out / f"{name}.csv")
    if not plots:
        return
    from engines.bench import plots as figures  # matplotlib: only when plotting

    if found.kind == "compare" and found.frames.get("probes"):
        figures.rate_plot(found.frame("probes"), out / "rate.png")
        figures.goodput_plot(found.frame("probes"), found.headline_slo(), found.goodput,
                             out / "goodput.png")
    if found.kind == "replay" and found.table()[COLUMN.offered_rps].nunique() > 1:
        # Each rate replayed once, and never given up on (replay has no give-up wait).
        figures.rate_plot(found.table().assign(**{COLUMN.gave_up: False}), out / "rate.png")


def publish(found: Report, out: Path, *, plots: bool) -> None:
    """Render `found` into `out` and print its text: what every subcommand that measures, and
    `render`, ends with."""
    render(found, out, plots=plots)
    print(found.text())
