"""The comparison the CLI and asv run: every measurement for one engine, then a summary row.

Per engine: closed mixed runs (2 warm-up, 5 recorded: output tokens/s and the start of the
capacity search), the capacity search, the admission-disturbance run and a small slot-timeline
run; the closed runs and the capacity probes run the engines paired. Then, for all engines at
one common rate, a paired reference open-loop run for the latency columns (0.8 x the best
capacity measured, as the serving series' continuous-batching part, docs/references.md,
compared engines at 1 req/s against a 1.25 req/s capacity).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engines.bench import capacity, disturbance, draws, traces
from engines.bench.metrics import SLO, requests_frame, summarize, tokens_frame
from engines.bench.paired import run_closed_paired, run_paired
from engines.bench.replay import Run, run_trace
from engines.factories import check_engine
from engines.protocol import Engine

EngineFactory = Callable[[], Engine]

SUMMARY_COLUMNS = [
    "engine", "capacity_rps", "capacity_low_rps", "capacity_high_rps", "output_tokens_per_s",
    "ttft_p50_s", "ttft_p95_s", "queue_wait_p50_s", "queue_wait_p95_s", "itl_p50_s",
    "itl_p95_s", "itl_max_s", "e2e_p50_s", "goodput_rps", "itl_spike_ratio",
    "spike_prompt_len", "baseline_itl_s", "wasted_slot_steps", "driver_overhead_pct",
    "reference_rps",
]


@dataclass(frozen=True, slots=True)
class Config:
    preset: str = "tiny"
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: int = 8
    seed: int = 0
    capacity_requests: int = 400  # per probe, as the write-up's traces (docs/references.md)
    iterations: int = 5  # bisection steps after the bracket holds
    closed_requests: int = 32
    warmup: int = 2
    runs: int = 5
    disturbance_requests: int = 64  # the write-up: 64 mixed through 8 slots
    slo: SLO = SLO(ttft_s=1.0, tpot_s=0.1)
    reference_rps: float | None = None  # default: 0.8 x the best capacity

    @classmethod
    def for_hardware(cls, *, quick: bool = False, device: str | None = None,
                     **overrides: Any) -> Config:
        """The CPU preset without a GPU; qwen2.5-1.5b in fp16 on CUDA."""
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        base: dict[str, Any] = (
            {"preset": "qwen2.5-1.5b", "device": device, "dtype": "float16",
             "slo": SLO(ttft_s=2.0, tpot_s=0.1)}
            if device.startswith("cuda") else
            {"preset": "tiny", "device": device, "dtype": "float32",
             "slo": SLO(ttft_s=0.2, tpot_s=0.02)}
        )
        if quick:
            base.update(capacity_requests=200, iterations=5, closed_requests=32,
                        disturbance_requests=64, warmup=2, runs=5)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass(slots=True)
class EngineResult:
    name: str
    closed: list[Run]
    capacity: capacity.Capacity
    disturbance: Run
    spikes: pd.DataFrame
    timeline: Run | None
    reference: Run | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def runs(self) -> Iterator[Run]:
        yield from self.closed
        yield from (p.run for p in self.capacity.probes)
        yield self.disturbance
        if self.timeline is not None:
            yield self.timeline
        if self.reference is not None:
            yield self.reference


def default_engines(config: Config) -> dict[str, EngineFactory]:
    from engines.continuous import ContinuousBatchEngine
    from engines.static import StaticBatchEngine

    kwargs = {"model": config.preset, "device": config.device, "dtype": config.dtype,
              "max_batch_size": config.max_batch_size}
    return {"static": functools.partial(StaticBatchEngine, **kwargs),
            "continuous": functools.partial(ContinuousBatchEngine, **kwargs)}


def build(factories: dict[str, EngineFactory]) -> dict[str, Engine]:
    """One fresh engine per factory, each checked against the protocol (engines.factories)."""
    return {name: check_engine(make(), f"--engine {name}") for name, make in factories.items()}


def scale(engines: dict[str, Engine]) -> tuple[int, int]:
    """(max_model_len, vocab_size) every engine accepts: workloads must be identical."""
    return (min(int(e.max_model_len) for e in engines.values()),
            min(int(e.vocab_size) for e in engines.values()))


class Progress:
    """tqdm on stderr when available and wanted; otherwise silent."""

    def __init__(self, enabled: bool) -> None:
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(unit="run", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def stage(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description(text)

    def tick(self, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.update(1)
            if postfix:
                self._bar.set_postfix(postfix)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@contextmanager
def progress(enabled: bool) -> Iterator[Progress]:
    bar = Progress(enabled)
    try:
        yield bar
    finally:
        bar.close()


def _closed_rps(runs: list[Run]) -> float:
    return float(np.median([len(r.trace) / r.wall_s for r in runs]))


def _disturbance(name: str, engine: Engine, config: Config, mixed: Callable[..., list[Any]],
                 bar: Progress) -> tuple[Run, pd.DataFrame, Run | None]:
    bar.stage(f"{name}: disturbance")
    dist_trace = traces.closed(mixed(config.disturbance_requests, seed=config.seed + 2),
                               tag="dist")
    dist = run_trace(engine, dist_trace, name=name)
    bar.tick()
    _, spikes = disturbance.spikes(dist)
    timeline = None
    slots = getattr(engine, "max_batch_size", None)
    if callable(getattr(engine, "slot_table", None)) and isinstance(slots, int):
        bar.stage(f"{name}: timeline")
        items = mixed(2 * slots, seed=config.seed + 3)
        timeline = run_trace(engine, traces.closed(items, tag="timeline"), name=name,
                             record_slots=True)
        bar.tick()
    return dist, spikes, timeline


def bench_engines(engines: dict[str, Engine], config: Config, *, max_model_len: int,
                  vocab_size: int, bar: Progress | None = None) -> dict[str, EngineResult]:
    """Closed runs and capacity probes run the engines paired, step by step (engines.bench.
    paired): those give the ratios, and a slow spell of a shared machine must not land on one
    engine. The disturbance and timeline runs are per engine, on the wall clock."""
    bar = bar or Progress(False)
    seed = config.seed
    mixed = functools.partial(draws.mixed, max_model_len=max_model_len,
                              vocab_size=vocab_size)
    bar.stage("closed runs")
    closed_trace = traces.closed(mixed(config.closed_requests, seed=seed), tag="closed")
    closed = run_closed_paired(engines, closed_trace, warmup=config.warmup,
                               runs=config.runs, on_run=bar.tick)

    bar.stage("capacity")
    caps = capacity.search_many(
        engines, mixed(config.capacity_requests, seed=seed + 1),
        start_rates={name: _closed_rps(runs) for name, runs in closed.items()}, seed=seed,
        iterations=config.iterations, slo=config.slo,
        on_probe=lambda p: bar.tick(engine=p.run.engine, rate=f"{p.rate:.3g}",
                                    stable=p.stable))
    results = {}
    for name, engine in engines.items():
        dist, spikes, timeline = _disturbance(name, engine, config, mixed, bar)
        results[name] = EngineResult(name, closed[name], caps[name], dist, spikes, timeline)
    return results


def reference_runs(results: dict[str, EngineResult], engines: dict[str, Engine], rate: float,
                   config: Config, *, max_model_len: int, vocab_size: int) -> None:
    """Every engine at one common rate, paired: the latency columns of the summary."""
    items = draws.mixed(config.capacity_requests, max_model_len=max_model_len,
                            vocab_size=vocab_size, seed=config.seed + 1)
    trace = traces.poisson(items, rate, seed=config.seed, tag="ref")
    for name, run in run_paired(engines, dict.fromkeys(engines, trace)).items():
        results[name].reference = run


def summary_row(result: EngineResult, config: Config) -> dict[str, Any]:
    tokens_per_s = float(np.median([summarize(r)["output_tokens_per_s"] for r in result.closed]))
    ref = summarize(result.reference, slo=config.slo) if result.reference is not None else {}
    spike_table = result.spikes.sort_values("admitted_prompt_len")
    runs = list(result.runs())
    step_s = sum(r.step_s for r in runs)
    return {
        "engine": result.name,
        "capacity_rps": result.capacity.low,
        "capacity_low_rps": result.capacity.low,
        "capacity_high_rps": result.capacity.high,
        "output_tokens_per_s": tokens_per_s,
        **{k: ref.get(k, np.nan) for k in (
            "ttft_p50_s", "ttft_p95_s", "queue_wait_p50_s", "queue_wait_p95_s", "itl_p50_s",
            "itl_p95_s", "itl_max_s", "e2e_p50_s", "goodput_rps")},
        "itl_spike_ratio": disturbance.spike_ratio(result.spikes),
        "spike_prompt_len": (int(spike_table["admitted_prompt_len"].iloc[-1])
                             if len(spike_table) else np.nan),
        "baseline_itl_s": (float(spike_table["baseline_gap_s"].iloc[0])
                           if len(spike_table) else np.nan),
        "wasted_slot_steps": result.closed[-1].wasted_slot_steps,
        "driver_overhead_pct": 100.0 * sum(r.driver_s for r in runs) / step_s if step_s else 0,
        "reference_rps": result.reference.trace.rate if result.reference else np.nan,
    }


def compare(factories: dict[str, EngineFactory], config: Config, *,
            show_progress: bool = False) -> tuple[pd.DataFrame, dict[str, EngineResult]]:
    """Benchmark every engine on the same draws and traces; one summary row per engine."""
    engines = build(factories)
    max_model_len, vocab_size = scale(engines)
    with progress(show_progress) as bar:
        results = bench_engines(engines, config, max_model_len=max_model_len,
                                vocab_size=vocab_size, bar=bar)
        best = max(r.capacity.low for r in results.values())
        rate = config.reference_rps or 0.8 * best
        if rate > 0:
            bar.stage(f"reference {rate:.3g} req/s")
            reference_runs(results, engines, rate, config, max_model_len=max_model_len,
                           vocab_size=vocab_size)
            bar.tick()
    summary = pd.DataFrame([summary_row(r, config) for r in results.values()])
    return summary[SUMMARY_COLUMNS], results


def frames(results: dict[str, EngineResult], config: Config) -> dict[str, pd.DataFrame]:
    """The CSV tables: per request and per token (reference and disturbance runs), probes,
    spikes, closed runs."""
    requests, tokens, probes, closed = [], [], [], []
    for result in results.values():
        for label, run in (("reference", result.reference), ("disturbance", result.disturbance)):
            if run is None:
                continue
            requests.append(requests_frame(run).assign(run=label))
            tokens.append(tokens_frame(run).assign(run=label))
        for p in result.capacity.probes:
            probes.append({**p.summary, "bracket": result.capacity.bracket()})
        for i, run in enumerate(result.closed):
            closed.append({**summarize(run), "run": i})
    return {
        "requests": pd.concat(requests, ignore_index=True),
        "tokens": pd.concat(tokens, ignore_index=True),
        "probes": pd.DataFrame(probes),
        "spikes": pd.concat([r.spikes for r in results.values()], ignore_index=True),
        "closed": pd.DataFrame(closed),
    }
