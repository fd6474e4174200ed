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

Two rounds: with `--interleave-rounds` (asv's default where it builds its environments, and
what ci/asv-gate.sh and ci/asv-gpu.sh pass) each round is a fresh process whose setup_cache
runs a whole new comparison, the rounds of a commit and of its parent alternate, and asv
appends each round's samples to the last. So a figure's samples span two comparisons run at
different times, and asv's confidence interval over them covers the host's drift between
runs, not only the spread inside one (docs/benchmarks.md, "asv"). Without interleaving (an
existing environment, `--no-interleave-rounds`) asv would set up the cache once and read the
same samples twice, doubling them without measuring anything new: don't. `--quick` (the CI
smoke, ci/asv-smoke.sh) runs one round.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any
from unittest import mock

from benchmarks.common import ENGINES, config, progress_interval
from benchmarks.watch import watched
from engines.bench.record import COLUMN  # the samples' names (record.Samples); no torch

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
        from engines.bench import comparison, output
        from engines.bench.config import default_engines

        cfg = config()
        watch.totals["closed runs"] = cfg.warmup + cfg.runs
        # compare() reports its stages to an engines.bench.progress bar; the watch takes its
        # place (the same stage/tick interface), as asv would keep a bar's output to itself.
        with mock.patch.object(comparison, "progress", lambda enabled: nullcontext(watch)):
            result = comparison.compare(default_engines(cfg), cfg, show_progress=True)
    return output.report(result).samples  # the run's one report (engines.bench.run_report)


setup_cache.timeout = 1800  # type: ignore[attr-defined]  # a GPU comparison takes minutes


def _samples(cache: Samples, engine: str, figure: str) -> dict[str, Any]:
    values = cache[engine][figure]
    if not values:
        raise SkipNotImplemented(f"{figure} is not defined for {engine}")
    return {"samples": values, "number": 1}


class Serving:
    params = ENGINES
    param_names = ["engine"]
    # Each round one whole comparison (see the module's docstring): two are the fewest that
    # say how far a figure moves between comparisons, at twice the setup's minutes.
    rounds = 2

    def track_seconds_per_output_token(self, cache: Samples, engine: str) -> dict[str, Any]:
        """Closed mixed batch, one sample per recorded run: 1 / output tokens per second."""
        return _samples(cache, engine, COLUMN.seconds_per_output_token)

    track_seconds_per_output_token.unit = "seconds/token"  # type: ignore[attr-defined]

    def track_seconds_per_request_at_capacity(self, cache: Samples,
                                              engine: str) -> dict[str, Any]:
        """1 / throughput capacity, one sample per replica of the search."""
        return _samples(cache, engine, COLUMN.seconds_per_request_at_capacity)

    track_seconds_per_request_at_capacity.unit = "seconds/request"  # type: ignore[attr-defined]

    def track_seconds_per_request_at_goodput(self, cache: Samples,
                                             engine: str) -> dict[str, Any]:
        """1 / goodput capacity under the hardware-derived SLO, one sample per replica."""
        return _samples(cache, engine, COLUMN.seconds_per_request_at_goodput)

    track_seconds_per_request_at_goodput.unit = "seconds/request"  # type: ignore[attr-defined]

    def track_ttft_p95(self, cache: Samples, engine: str) -> dict[str, Any]:
        """TTFT p95 of the reference run: each engine at `reference_load` (0.5) x its own
        closed-batch request rate, re-timed just before the run (engines.bench.reference),
        not at a fraction of its searched capacity; one sample per replica."""
        return _samples(cache, engine, COLUMN.ttft_p95_s)

    track_ttft_p95.unit = "seconds"  # type: ignore[attr-defined]

    def track_itl_spike_ratio(self, cache: Samples, engine: str) -> dict[str, Any]:
        """Incumbents' ITL in a step admitting the longest prompt / baseline, one sample per
        such step."""
        return _samples(cache, engine, COLUMN.itl_spike_ratio)

    track_itl_spike_ratio.unit = "ratio"  # type: ignore[attr-defined]

    def track_driver_overhead(self, cache: Samples, engine: str) -> dict[str, Any]:
        """The harness's own time as a percentage of step time (target: under 2), per run."""
        return _samples(cache, engine, COLUMN.driver_overhead_pct)

    track_driver_overhead.unit = "percent"  # type: ignore[attr-defined]
