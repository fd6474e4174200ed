"""Serving figures per engine, from one engines.bench comparison per asv run.

asv counts any rise in a benchmark's value as a regression, and asv 0.6 has no
higher-is-better switch for track_ benchmarks (airspeed-velocity/asv#1617 asks for one and
is open). So throughput and capacity are tracked as their reciprocals: seconds per output
token and seconds per request at capacity. A slower engine then reads as a rise, as it must
for `asv continuous --factor` to gate on it.
"""

from __future__ import annotations

import math
from typing import Any

from benchmarks.common import ENGINES, config
from engines.bench import comparison

try:
    from asv_runner.benchmarks.mark import SkipNotImplemented
except ImportError:  # imported outside asv
    SkipNotImplemented = NotImplementedError  # type: ignore[misc, assignment]


def setup_cache() -> dict[str, dict[str, Any]]:
    """Run the whole comparison once; every track_ below reads its row."""
    cfg = config()
    summary, _ = comparison.compare(comparison.default_engines(cfg), cfg)
    return summary.set_index("engine").to_dict("index")


setup_cache.timeout = 3600  # type: ignore[attr-defined]  # a GPU comparison takes minutes


def _value(row: dict[str, Any], key: str) -> float:
    value = float(row[key])
    if math.isnan(value):
        raise SkipNotImplemented(f"{key} is not defined for this engine")
    return value


class Serving:
    params = ENGINES
    param_names = ["engine"]

    def track_seconds_per_output_token(self, rows: dict[str, dict[str, Any]],
                                       engine: str) -> float:
        """Closed mixed batch: 1 / output tokens per second (lower is better)."""
        return 1.0 / _value(rows[engine], "output_tokens_per_s")

    track_seconds_per_output_token.unit = "seconds/token"  # type: ignore[attr-defined]

    def track_seconds_per_request_at_capacity(self, rows: dict[str, dict[str, Any]],
                                              engine: str) -> float:
        """1 / capacity: the inverse of the highest stable Poisson rate (lower is better)."""
        return 1.0 / _value(rows[engine], "capacity_rps")

    track_seconds_per_request_at_capacity.unit = "seconds/request"  # type: ignore[attr-defined]

    def track_ttft_p95(self, rows: dict[str, dict[str, Any]], engine: str) -> float:
        """TTFT p95 at the common reference rate (0.8 x the best capacity)."""
        return _value(rows[engine], "ttft_p95_s")

    track_ttft_p95.unit = "seconds"  # type: ignore[attr-defined]

    def track_itl_spike_ratio(self, rows: dict[str, dict[str, Any]], engine: str) -> float:
        """Incumbents' ITL in steps admitting the longest prompt / baseline ITL."""
        return _value(rows[engine], "itl_spike_ratio")

    track_itl_spike_ratio.unit = "ratio"  # type: ignore[attr-defined]

    def track_driver_overhead(self, rows: dict[str, dict[str, Any]], engine: str) -> float:
        """The harness's own time as a percentage of step time (target: under 2)."""
        return _value(rows[engine], "driver_overhead_pct")

    track_driver_overhead.unit = "percent"  # type: ignore[attr-defined]
