"""One report per comparison: what every rendering reads, serialized as report.json.

A comparison's renderings (the table a person reads and its closing lines, summary.csv and the
probe, spike and closed-run CSVs, the rate and goodput plots, asv's samples) are all made from
this one object, built once from the measured runs (`build`); a saved report renders the same
table again (`python -m engines.bench render DIR`). What it does not hold is raw data, saved
beside it from the runs: the per-request and per-token records, the traces, the timelines.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engines.bench.slo import SLO
from engines.bench.table import format_table

VERSION = 1
FILE = "report.json"
FRAMES = ("probes", "spikes", "closed")  # the small CSV tables it carries


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
    config: dict[str, Any]  # engines.bench.config.Config's fields
    slo: dict[str, Any]  # the headline targets (engines.bench.slo.SLO's fields)
    summary: list[dict[str, Any]]  # one row per engine, summary.csv's columns in order
    notes: list[str]  # the closing lines under the table
    frames: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # FRAMES
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # asv's
    goodput: dict[str, float] = field(default_factory=dict)  # each engine's, for the plot
    version: int = VERSION

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.summary)

    def frame(self, name: str) -> pd.DataFrame:
        return pd.DataFrame(self.frames.get(name, []))

    def headline_slo(self) -> SLO:
        return SLO(**self.slo)

    def text(self) -> str:
        """The closing text: the winner table, then the notes."""
        return "\n".join([format_table(self.table()), "", *self.notes])

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plain(asdict(self)), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> Report:
        data = json.loads(path.read_text())
        if data.get("version") != VERSION:
            raise ValueError(f"{path}: report version {data.get('version')!r}, this bench "
                             f"reads {VERSION}")
        return cls(**data)
