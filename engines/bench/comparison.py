"""The comparison the CLI and asv run: every measurement of every engine, paired.

1. SLO targets from the hardware (engines.bench.calibration), unless both are given.
2. Closed mixed runs (2 warm-up, 5 recorded): output tokens/s and where the search starts.
3. Per replica (one by default; asv asks for more, as samples): the capacity search, the
   goodput search below it, and a reference open-loop run for the latency columns, each
   engine at `reference_load` (0.8) x its own capacity, so an engine's latency figures never
   move because another engine's capacity did.
4. The admission disturbance (every prompt class admitted into running batches) and a small
   slot-timeline run.
Every stage drives the engines paired, step by step (engines.bench.paired): the ratios between
engines are what a comparison is for, and a slow spell of a shared machine must not land on
one engine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engines.bench import calibration, capacity, disturbance, draws, traces
from engines.bench.capacity import Capacity
from engines.bench.config import Config, EngineFactory
from engines.bench.devices import Sync, synchronizer
from engines.bench.paired import run_closed_paired, run_paired
from engines.bench.progress import Progress, progress
from engines.bench.replay import Run
from engines.bench.slo import SLO, HardwareTimes, derive
from engines.factories import check_engine
from engines.protocol import Engine

MAX_DRAWN_SLOTS = 64


@dataclass(slots=True)
class EngineResult:
    name: str
    closed: list[Run]
    capacities: list[Capacity] = field(default_factory=list)  # one per replica
    goodputs: list[Capacity] = field(default_factory=list)
    references: list[Run | None] = field(default_factory=list)
    disturbance: Run | None = None
    spikes: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: Run | None = None

    @property
    def capacity(self) -> Capacity:
        return self.capacities[0]

    @property
    def goodput(self) -> Capacity:
        return self.goodputs[0]

    @property
    def reference(self) -> Run | None:
        return self.references[0] if self.references else None

    def runs(self) -> Iterator[Run]:
        yield from self.closed
        for result in (*self.capacities, *self.goodputs):
            yield from (p.run for p in result.probes)
        yield from (r for r in (*self.references, self.disturbance, self.timeline) if r)


@dataclass(slots=True)
class Comparison:
    config: Config
    slo: SLO
    hardware: HardwareTimes | None  # None when both targets were given
    results: dict[str, EngineResult]


def build(factories: dict[str, EngineFactory]) -> dict[str, Engine]:
    """One fresh engine per factory, each checked against the protocol (engines.factories)."""
    return {name: check_engine(make(), f"--engine {name}") for name, make in factories.items()}


def scale(engines: dict[str, Engine]) -> tuple[int, int]:
    """(max_model_len, vocab_size) every engine accepts: workloads must be identical."""
    return (min(int(e.max_model_len) for e in engines.values()),
            min(int(e.vocab_size) for e in engines.values()))


def resolve_slo(config: Config, max_model_len: int) -> tuple[SLO, HardwareTimes | None]:
    """The goodput targets: both given, or derived from this machine's timings of the preset
    (each given target then replaces its derived one)."""
    if config.slo_ttft_s is not None and config.slo_itl_s is not None:
        return SLO(config.slo_ttft_s, config.slo_itl_s, config.slo_attainment), None
    times = calibration.measure(
        config.preset, device=config.device, dtype=config.dtype, batch=config.max_batch_size,
        prompt_len=draws.prompt_classes(max_model_len)[-1], seed=config.seed)
    slo = derive(times, config.preset, attainment=config.slo_attainment)
    return slo.override(ttft_s=config.slo_ttft_s, itl_s=config.slo_itl_s), times


def _closed_rps(runs: list[Run]) -> float:
    return float(np.median([len(r.trace) / r.wall_s for r in runs]))


def _replica(engines: dict[str, Engine], results: dict[str, EngineResult], config: Config,
             slo: SLO, mixed: functools.partial[list[draws.WorkItem]], replica: int,
             sync: Sync | None, bar: Progress) -> None:
    seed = config.seed + 10 * replica
    items = mixed(config.capacity_requests, seed=seed + 1)

    def tick(p: capacity.Probe) -> None:
        bar.tick(engine=p.run.engine, rate=f"{p.rate:.3g}", stable=p.stable)

    bar.stage(f"capacity (replica {replica + 1}/{config.replicas})")
    caps = capacity.search_many(
        engines, items, start_rates={n: _closed_rps(r.closed) for n, r in results.items()},
        seed=seed, iterations=config.iterations, slo=slo, retries=config.retries, sync=sync,
        tag=f"r{replica}c", on_probe=tick)
    bar.stage(f"goodput (replica {replica + 1}/{config.replicas})")
    goods = capacity.goodput_many(engines, items, capacities=caps, slo=slo, seed=seed,
                                  iterations=config.goodput_iterations,
                                  retries=config.retries, sync=sync, tag=f"r{replica}g",
                                  on_probe=tick)
    rates = {name: config.reference_rps or config.reference_load * caps[name].low
             for name in engines}
    live = {name: rate for name, rate in rates.items() if rate > 0}
    bar.stage("reference runs")
    refs = run_paired({n: engines[n] for n in live},
                      {n: traces.poisson(items, rate, seed=seed, tag=f"ref{replica}")
                       for n, rate in live.items()}, sync=sync)
    bar.tick()
    for name, result in results.items():
        result.capacities.append(caps[name])
        result.goodputs.append(goods[name])
        result.references.append(refs.get(name))


def _drawable(engine: Engine) -> bool:
    slots = getattr(engine, "max_batch_size", None)
    return isinstance(slots, int) and 0 < slots <= MAX_DRAWN_SLOTS


def _disturbance(engines: dict[str, Engine], results: dict[str, EngineResult],
                 config: Config, mixed: functools.partial[list[draws.WorkItem]],
                 max_model_len: int, vocab_size: int, sync: Sync | None,
                 bar: Progress) -> None:
    bar.stage("admission disturbance")
    items = draws.admissions(config.admissions_per_class, max_model_len=max_model_len,
                             vocab_size=vocab_size, slots=config.max_batch_size,
                             seed=config.seed + 2)
    dist = run_paired(engines, dict.fromkeys(engines, traces.closed(items, tag="dist")),
                      sync=sync)
    bar.tick()
    bar.stage("slot timeline")
    timeline_trace = traces.closed(mixed(2 * config.max_batch_size, seed=config.seed + 3),
                                   tag="timeline")
    # Only engines with a slot table small enough to draw.
    slotted = {name: engine for name, engine in engines.items()
               if callable(getattr(engine, "slot_table", None)) and _drawable(engine)}
    timelines = run_paired(slotted, dict.fromkeys(slotted, timeline_trace), sync=sync,
                           record_slots=True)
    bar.tick()
    for name, result in results.items():
        result.disturbance = dist[name]
        result.spikes = disturbance.spikes(dist[name], seed=config.seed)[1]
        result.timeline = timelines.get(name)


def compare(factories: dict[str, EngineFactory], config: Config, *,
            show_progress: bool = False) -> Comparison:
    """Benchmark every engine on the same draws and traces, paired."""
    engines = build(factories)
    max_model_len, vocab_size = scale(engines)
    sync = synchronizer(config.device)
    mixed = functools.partial(draws.mixed, max_model_len=max_model_len, vocab_size=vocab_size)
    with progress(show_progress) as bar:
        bar.stage("SLO calibration")
        slo, hardware = resolve_slo(config, max_model_len)
        bar.stage("closed runs")
        closed_trace = traces.closed(mixed(config.closed_requests, seed=config.seed),
                                     tag="closed")
        closed = run_closed_paired(engines, closed_trace, warmup=config.warmup,
                                   runs=config.runs, on_run=bar.tick, sync=sync)
        results = {name: EngineResult(name, closed[name]) for name in engines}
        for replica in range(config.replicas):
            _replica(engines, results, config, slo, mixed, replica, sync, bar)
        _disturbance(engines, results, config, mixed, max_model_len, vocab_size, sync, bar)
    return Comparison(config, slo, hardware, results)
