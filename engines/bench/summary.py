"""A comparison as tables: one summary row per engine, the CSV frames, and asv's samples.

The summary reads the first replica (the CLI runs one); asv's samples read every replica.
Column names are a contract (scripts read summary.csv): new ones are appended, none renamed
(capacity_low_rps, a copy of capacity_rps, was dropped: CHANGELOG.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from engines.bench import disturbance
from engines.bench.comparison import Comparison, EngineResult
from engines.bench.metrics import overhead_pct, requests_frame, tokens_frame

SUMMARY_COLUMNS = [
    "engine", "capacity_rps", "capacity_high_rps", "output_tokens_per_s",
    "ttft_p50_s", "ttft_p95_s", "queue_wait_p50_s", "queue_wait_p95_s", "queue_wait_mean_s",
    "itl_p50_s", "itl_p95_s", "itl_max_s", "e2e_p50_s", "goodput_rps", "itl_spike_ratio",
    "spike_prompt_len", "baseline_itl_s", "wasted_slot_steps", "driver_overhead_pct",
    "reference_rps",
    # goodput capacity's bracket and the SLO it was judged under; the spike's CI
    "goodput_high_rps", "slo_ttft_s", "slo_itl_s", "slo_attainment", "itl_spike_ci_low",
    "itl_spike_ci_high", "itl_spike_samples",
    # the factor within which capacity and goodput share a win (engines.bench.table); the
    # closed-batch rate re-timed before the reference run, which reference_rps is a share of,
    # and the host's drift between the two (engines.bench.reference)
    "search_tie", "reference_basis_rps", "reference_drift",
    # the steady clock's gauge step at the start and the range of the host's speed factor
    # over the run (engines.bench.host.steady); nan on the other clocks
    "steady_baseline_s", "host_speed_min", "host_speed_max",
    # the SLO yardstick's prefill over its decode step during the disturbance run: the host's
    # mix of the two speeds that itl_spike_ratio moves with; nan when the targets were given
    "spike_host_prefill_x",
    # the CPU threads each engine computes with and how it executes, as it declares them
    # (engines.bench.describe): a ratio between engines is at equal cores only if equal
    "compute_threads", "execution",
]
LATENCY_COLUMNS = ("ttft_p50_s", "ttft_p95_s", "queue_wait_p50_s", "queue_wait_p95_s",
                   "queue_wait_mean_s", "itl_p50_s", "itl_p95_s", "itl_max_s", "e2e_p50_s")


def summary_row(result: EngineResult, comparison: Comparison) -> dict[str, Any]:
    slo = comparison.slo
    ref = result.reference_summaries[0] if result.reference_summaries else {}
    spike = disturbance.headline(result.spikes)
    baseline = result.spikes["baseline_gap_s"].iloc[0] if len(result.spikes) else np.nan
    described = comparison.engines.get(result.name)
    return {
        "engine": result.name,
        "capacity_rps": result.capacity.low,
        "capacity_high_rps": result.capacity.high,
        "output_tokens_per_s": result.tokens_per_s,
        **{k: ref.get(k, np.nan) for k in LATENCY_COLUMNS},
        "goodput_rps": result.goodput.low,
        "itl_spike_ratio": spike["ratio"],
        "spike_prompt_len": spike["prompt_len"],
        "baseline_itl_s": baseline,
        "wasted_slot_steps": result.closed[-1].wasted_slot_steps,
        "driver_overhead_pct": overhead_pct(list(result.runs())),
        "reference_rps": result.reference.trace.rate if result.reference else np.nan,
        "goodput_high_rps": result.goodput.high,
        "slo_ttft_s": slo.ttft_s,
        "slo_itl_s": slo.itl_s,
        "slo_attainment": slo.attainment,
        "itl_spike_ci_low": spike["ci_low"],
        "itl_spike_ci_high": spike["ci_high"],
        "itl_spike_samples": spike["steps"],
        "search_tie": comparison.config.search_tie,
        "reference_basis_rps": (result.reference_basis_rps[0] if result.reference_basis_rps
                                else np.nan),
        "reference_drift": (comparison.reference_drift[0] if comparison.reference_drift
                            else np.nan),
        "steady_baseline_s": (comparison.steady_baseline_s
                              if comparison.steady_baseline_s is not None else np.nan),
        "host_speed_min": comparison.host_speed[0] if comparison.host_speed else np.nan,
        "host_speed_max": comparison.host_speed[1] if comparison.host_speed else np.nan,
        "spike_host_prefill_x": (comparison.disturbance_times.prefill_over_decode()
                                 if comparison.disturbance_times is not None else np.nan),
        "compute_threads": (described.threads if described and described.threads is not None
                            else np.nan),
        "execution": described.execution if described else "",
    }


def summary(comparison: Comparison) -> pd.DataFrame:
    rows = [summary_row(r, comparison) for r in comparison.results.values()]
    return pd.DataFrame(rows)[SUMMARY_COLUMNS]


def frames(comparison: Comparison) -> dict[str, pd.DataFrame]:
    """The CSV tables: per request and per token (reference and disturbance runs), every
    probe of both searches, spikes by admitted length, closed runs."""
    requests: list[pd.DataFrame] = []
    tokens: list[pd.DataFrame] = []
    probes: list[dict[str, Any]] = []
    closed: list[dict[str, Any]] = []
    for result in comparison.results.values():
        for label, run in (("reference", result.reference),
                           ("disturbance", result.disturbance)):
            if run is None:
                continue
            requests.append(requests_frame(run).assign(run=label))
            tokens.append(tokens_frame(run).assign(run=label))
        for replica, (cap, good) in enumerate(zip(result.capacities, result.goodputs,
                                                  strict=True)):
            for search, found in (("capacity", cap), ("goodput", good)):
                probes.extend({**p.summary, "search": search, "replica": replica,
                               "bracket": found.bracket()} for p in found.probes)
        closed.extend({**row, "run": i} for i, row in enumerate(result.closed_summaries))
    return {
        "requests": pd.concat(requests, ignore_index=True),
        "tokens": pd.concat(tokens, ignore_index=True),
        "probes": pd.DataFrame(probes),
        "spikes": pd.concat([r.spikes for r in comparison.results.values()],
                            ignore_index=True),
        "closed": pd.DataFrame(closed),
    }


def samples(result: EngineResult) -> dict[str, list[float]]:
    """Repeated measurements of each tracked figure, for asv's statistics: closed runs,
    replicas of the searches and the reference run, admission steps."""
    def inverse(values: list[float]) -> list[float]:
        return [1.0 / v for v in values if v > 0 and np.isfinite(v)]

    references = [r for r in result.references if r is not None]
    return {
        "seconds_per_output_token": inverse(
            [s["output_tokens_per_s"] for s in result.closed_summaries]),
        "seconds_per_request_at_capacity": inverse([c.low for c in result.capacities]),
        "seconds_per_request_at_goodput": inverse([g.low for g in result.goodputs]),
        "ttft_p95_s": [float(s["ttft_p95_s"]) for s in result.reference_summaries],
        "itl_spike_ratio": (disturbance.headline_samples(result.disturbance)
                            if result.disturbance is not None else []),
        "driver_overhead_pct": [overhead_pct([r]) for r in (*result.closed, *references)],
    }
