"""Serving figures per engine, from one engines.bench comparison per asv run, with samples.

asv counts any rise in a benchmark's value as a regression, and asv 0.6 has no
higher-is-better switch for track_ benchmarks (airspeed-velocity/asv#1617 asks for one and
is open). So throughput, capacity and goodput are tracked as their reciprocals: seconds per
output token, seconds per request at capacity and at goodput capacity. A slower engine then
reads as a rise, as it must for `asv continuous --factor` to gate on it.

Each track_ returns its repeated measurements as asv's timing results do ({"samples": [...],
"number": 1}): asv stores them, reports their median, and `asv continuous` then applies its
significance test (Mann-Whitney U, or non-overlapping confidence intervals for few samples)
before calling a change a regression, instead of comparing two single numbers.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any
from unittest import mock

from benchmarks.common import ENGINES, config, progress_interval
from benchmarks.watch import watched

try:
    from asv_runner.benchmarks.mark import SkipNotImplemented
except ImportError:  # imported outside asv
    SkipNotImplemented = NotImplementedError  # type: ignore[misc, assignment]

Samples = dict[str, dict[str, list[float]]]


def setup_cache() -> Samples:
    """Run the whole comparison once (warm-up runs first); every track_ reads its samples.
    It takes minutes, in a process asv keeps silent: benchmarks.watch reports each stage of
    it on asv's console, and ends it if asv goes away."""
    with watched("bench_serving setup", interval=progress_interval(),
                 stall=setup_cache.timeout) as watch:  # type: ignore[attr-defined]
        watch.stage("importing the comparison")
        # Imported here, not at the top: asv runs every track_ below in a process of its own,
        # and those only read the cache (the comparison's imports, torch and transformers,
        # are most of a track_'s time otherwise).
        from engines.bench import comparison, summary
        from engines.bench.config import default_engines

        cfg = config()
        watch.totals["closed runs"] = cfg.warmup + cfg.runs
        # compare() reports its stages to an engines.bench.progress bar; the watch takes its
        # place (the same stage/tick interface), as asv would keep a bar's output to itself.
        with mock.patch.object(comparison, "progress", lambda enabled: nullcontext(watch)):
            result = comparison.compare(default_engines(cfg), cfg, show_progress=True)
    return {name: summary.samples(r) for name, r in result.results.items()}


setup_cache.timeout = 1800  # type: ignore[attr-defined]  # a GPU comparison takes minutes


def _samples(cache: Samples, engine: str, figure: str) -> dict[str, Any]:
    values = cache[engine][figure]
    if not values:
        raise SkipNotImplemented(f"{figure} is not defined for {engine}")
    return {"samples": values, "number": 1}


class Serving:
    params = ENGINES
    param_names = ["engine"]
    rounds = 1  # the samples come from one comparison; a second round would repeat them

    def track_seconds_per_output_token(self, cache: Samples, engine: str) -> dict[str, Any]:
        """Closed mixed batch, one sample per recorded run: 1 / output tokens per second."""
        return _samples(cache, engine, "seconds_per_output_token")

    track_seconds_per_output_token.unit = "seconds/token"  # type: ignore[attr-defined]

    def track_seconds_per_request_at_capacity(self, cache: Samples,
                                              engine: str) -> dict[str, Any]:
        """1 / throughput capacity, one sample per replica of the search."""
        return _samples(cache, engine, "seconds_per_request_at_capacity")

    track_seconds_per_request_at_capacity.unit = "seconds/request"  # type: ignore[attr-defined]

    def track_seconds_per_request_at_goodput(self, cache: Samples,
                                             engine: str) -> dict[str, Any]:
        """1 / goodput capacity under the hardware-derived SLO, one sample per replica."""
        return _samples(cache, engine, "seconds_per_request_at_goodput")

    track_seconds_per_request_at_goodput.unit = "seconds/request"  # type: ignore[attr-defined]

    def track_ttft_p95(self, cache: Samples, engine: str) -> dict[str, Any]:
        """TTFT p95 at 0.8 x the engine's own capacity, one sample per replica."""
        return _samples(cache, engine, "ttft_p95_s")

    track_ttft_p95.unit = "seconds"  # type: ignore[attr-defined]

    def track_itl_spike_ratio(self, cache: Samples, engine: str) -> dict[str, Any]:
        """Incumbents' ITL in a step admitting the longest prompt / baseline, one sample per
        such step."""
        return _samples(cache, engine, "itl_spike_ratio")

    track_itl_spike_ratio.unit = "ratio"  # type: ignore[attr-defined]

    def track_driver_overhead(self, cache: Samples, engine: str) -> dict[str, Any]:
        """The harness's own time as a percentage of step time (target: under 2), per run."""
        return _samples(cache, engine, "driver_overhead_pct")

    track_driver_overhead.unit = "percent"  # type: ignore[attr-defined]
