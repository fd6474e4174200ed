"""A server's Prometheus /metrics text, read as numbers: what a dialect turns into the
protocol's `Load` (requests running and waiting, KV use) for the suite's drain check.

Only the text exposition format's sample lines are read (`name{labels} value [timestamp]`);
a metric with several label sets (one per engine of a data-parallel server) comes back as
every sample, and the dialect decides how they combine.
"""

from __future__ import annotations

import math

__all__ = ["samples"]


def samples(text: str) -> dict[str, list[float]]:
    """Metric name -> its samples' values, in the order they appear (comments skipped)."""
    out: dict[str, list[float]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if not math.isnan(value):
            out.setdefault(name.strip(), []).append(value)
    return out
