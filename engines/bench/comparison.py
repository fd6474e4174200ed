"""The comparison the CLI and asv run: every measurement of every engine, paired.

1. SLO targets, unless both are given: the preset's transformers forward
   (engines.bench.calibration) timed once before the run, on the engines' clock; with the
   noisy-host kit (engines.bench.host) its one gauge times it between the engines' steps in
   every probe round instead, each round judged by its own targets (slo.PairedSLO).
2. Closed mixed runs (2 warm-up, 5 recorded): output tokens/s and where the search starts.
3. Per replica (one by default; asv asks for more, as samples): the capacity search, the
   goodput search below it, and a reference open-loop run (twice a probe's requests unless
   `reference_requests` says otherwise; --quick keeps the full run's 800) for
   the latency columns, each engine at `reference_load` (0.5) x its own closed-batch request
   rate, so an engine's latency figures never move because another engine's did. The closed
   rate, not the capacity bracket: a median of paired closed runs moves a few percent between
   runs, where the search's verdicts near capacity move it by up to 20%, and latency at a
   fixed share of a rate inherits every percent of it. The kit re-times it just before the
   reference run (engines.bench.reference).
4. The admission disturbance (every prompt class admitted into running batches) and a small
   slot-timeline run.
Every stage drives the engines paired, step by step (engines.bench.paired): the ratios between
engines are what a comparison is for, and a slow spell of a shared machine must not land on
one engine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engines.bench import capacity, clocks, disturbance, draws, reference, traces
from engines.bench.capacity import Capacity
from engines.bench.clocks import TimeSource
from engines.bench.config import Config, EngineFactory
from engines.bench.describe import EngineDescription, describe
from engines.bench.devices import synchronizer
from engines.bench.fresh import FreshPrompts
from engines.bench.host import kit as host_kit
from engines.bench.host.kit import HostKit
from engines.bench.host.steady import SteadyTime
from engines.bench.metrics import summarize
from engines.bench.progress import Progress, progress
from engines.bench.record import RunSummary
from engines.bench.replay import Run
from engines.bench.run_context import RunContext
from engines.bench.slo import (
    SLO,
    HardwareTimes,
    PairedSLO,
    Targets,
    Timer,
    TimingSource,
    derive,
    time_once,
)
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
    # The closed-batch request rate each reference run's is a share of (re-timed before it)
    reference_basis_rps: list[float] = field(default_factory=list)
    disturbance: Run | None = None
    spikes: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: Run | None = None
    # Each run summarized once (engines.bench.metrics.summarize), for every table that reads
    # it: the closed runs as they finish, the reference runs under the headline SLO.
    closed_summaries: list[RunSummary] = field(default_factory=list)
    reference_summaries: list[RunSummary] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens/s of the closed runs: their median."""
        return float(np.median([s.output_tokens_per_s for s in self.closed_summaries]))

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
    slo: SLO  # the headline targets: given, or the median round's
    hardware: HardwareTimes | None  # the median round's timings; None when both were given
    results: dict[str, EngineResult]
    targets: Targets | None = None  # what judged the probes (a PairedSLO keeps every round)
    engines: dict[str, EngineDescription] = field(default_factory=dict)
    # Per replica: how far the host's speed moved between re-timing and reference run
    reference_drift: list[float] = field(default_factory=list)
    # The steady clock's gauge (engines.bench.host.steady): its step over its first turns, in
    # seconds, and the lowest and highest factor the host's speed took over the run; None on
    # the other clocks
    steady_baseline_s: float | None = None
    host_speed: tuple[float, float] | None = None
    # The SLO yardstick's timings over the admission-disturbance steps (its turns between
    # them): the host's own prefill against its decode step while the spikes were measured;
    # None when the targets were given
    disturbance_times: HardwareTimes | None = None


def build(factories: dict[str, EngineFactory], bar: Progress | None = None) -> dict[str, Engine]:
    """One fresh engine per factory, each checked against the protocol (engines.factories)."""
    engines = {}
    for name, make in factories.items():
        engines[name] = check_engine(make(), f"--engine {name}")
        if bar is not None:
            bar.tick(engine=name)
    return engines


def scale(engines: dict[str, Engine]) -> tuple[int, int]:
    """(max_model_len, vocab_size) every engine accepts: workloads must be identical."""
    return (min(int(e.max_model_len) for e in engines.values()),
            min(int(e.vocab_size) for e in engines.values()))


def targets(config: Config, max_model_len: int, timer: Timer | None = None,
            kit: HostKit | None = None) -> tuple[Targets, HardwareTimes | None]:
    """The goodput targets and, when derived once, the timings behind them: both given (one
    SLO for every round); with the kit, a PairedSLO on its gauge, derived in every round;
    else derived once from the preset's forward (or `timer`) timed before the run on the
    engines' clock. A given target replaces its derived one."""
    if config.slo_ttft_s is not None and config.slo_itl_s is not None:
        return SLO(config.slo_ttft_s, config.slo_itl_s, config.slo_attainment), None
    if kit is not None:
        return PairedSLO(kit.gauge, config.preset, attainment=config.slo_attainment,
                         ttft_s=config.slo_ttft_s, itl_s=config.slo_itl_s), None
    if timer is None:
        from engines.bench.calibration import for_config  # torch: only when timing

        timer = for_config(config, max_model_len)
    times = time_once(timer)
    slo = derive(times, config.preset, attainment=config.slo_attainment).override(
        ttft_s=config.slo_ttft_s, itl_s=config.slo_itl_s)
    return slo, times


def headline(slo: Targets, once: HardwareTimes | None) -> tuple[SLO, HardwareTimes | None]:
    if isinstance(slo, PairedSLO):
        median = slo.headline()
        return median.slo, median.times
    return slo, once


def context(config: Config, vocab_size: int, *, bar: Progress | None = None,
            kit: HostKit | None = None, time_source: TimeSource | None = None) -> RunContext:
    """The run context of a comparison under `config`: its device's sync, its clock (the
    kit's steady clock under --clock steady; `time_source`, tests: a virtual one), the kit's
    hook between steps when it is on, and prompts fresh to every run (engines.bench.fresh)
    over the engines' common `vocab_size`."""
    source = kit.steady if kit is not None and kit.steady is not None else \
        time_source or clocks.source(config.clock)
    return RunContext(sync=synchronizer(config.device), time_source=source,
                      hook=kit.turn if kit is not None else None, bar=bar, seed=config.seed,
                      fresh=FreshPrompts(vocab_size) if config.fresh_prompts else None)


def _replica(ctx: RunContext, engines: dict[str, Engine], results: dict[str, EngineResult],
             config: Config, slo: Targets, mixed: functools.partial[list[draws.WorkItem]],
             closed_trace: traces.ArrivalTrace, replica: int,
             gauge: TimingSource | None) -> float:
    """One replica's searches and reference run; returns the reference run's drift
    (engines.bench.reference)."""
    ctx = ctx.with_(seed=config.seed + 10 * replica)
    items = mixed(config.capacity_requests, seed=ctx.seed + 1)
    of = f"replica {replica + 1}/{config.replicas}"
    bar = ctx.bar or Progress(False)
    bar.stage(f"capacity rounds ({of})",
              capacity.planned_rounds(config.iterations, config.retries), unit="round")
    caps = capacity.search_many(
        ctx.with_(tag=f"r{replica}c"), engines, items,
        start_rates={n: reference.closed_rps(r.closed) for n, r in results.items()},
        iterations=config.iterations, slo=slo, retries=config.retries)
    bar.stage(f"goodput rounds ({of})",
              capacity.planned_rounds(config.goodput_iterations, config.retries), unit="round")
    goods = capacity.goodput_many(ctx.with_(tag=f"r{replica}g"), engines, items,
                                  capacities=caps, slo=slo,
                                  iterations=config.goodput_iterations,
                                  max_expand=config.goodput_halvings, retries=config.retries)
    bar.stage(f"reference run ({of})", reference.stages(config))
    # Twice a probe's requests unless given: a p95 of 400 requests rests on 20 of them, not 10.
    reference_items = mixed(config.reference_requests or 2 * config.capacity_requests,
                            seed=ctx.seed + 4)
    ref = reference.run_reference(
        ctx, engines, closed_trace, reference_items, config, replica=replica, gauge=gauge,
        closed={n: reference.closed_rps(r.closed) for n, r in results.items()})
    for name, result in results.items():
        result.capacities.append(caps[name])
        result.goodputs.append(goods[name])
        result.references.append(ref.runs.get(name))
        result.reference_basis_rps.append(ref.basis_rps[name])
    return ref.drift


def _drawable(engine: Engine) -> bool:
    slots = getattr(engine, "max_batch_size", None)
    return isinstance(slots, int) and 0 < slots <= MAX_DRAWN_SLOTS


def _disturbance(ctx: RunContext, engines: dict[str, Engine],
                 results: dict[str, EngineResult], config: Config,
                 mixed: functools.partial[list[draws.WorkItem]], max_model_len: int,
                 vocab_size: int, gauge: TimingSource | None) -> HardwareTimes | None:
    """The spikes and slot timelines into `results`; returns the kit's gauge's timings over
    the disturbance run when the kit is on. A spike is an admitting step's gap over a decode step's,
    and on a VM the host's prefill and decode speeds move apart between runs
    (docs/benchmarks.md, how stable a quick run is): the output states the host's own ratio
    over the same steps, so that runs are compared at the same one."""
    bar = ctx.bar or Progress(False)
    bar.stage("admission disturbance, slot timeline", 2)
    items = draws.admissions(config.admissions_per_class, max_model_len=max_model_len,
                             vocab_size=vocab_size, slots=config.max_batch_size,
                             seed=config.seed + 2)
    if gauge is not None:
        gauge.restart()
    dist = ctx.paired(engines, dict.fromkeys(engines, traces.closed(items, tag="dist")))
    times = gauge.take() if gauge is not None else None
    ctx.tick()
    timeline_trace = traces.closed(mixed(2 * config.max_batch_size, seed=config.seed + 3),
                                   tag="timeline")
    # Only engines with a slot table small enough to draw.
    slotted = {name: engine for name, engine in engines.items()
               if callable(getattr(engine, "slot_table", None)) and _drawable(engine)}
    timelines = ctx.paired(slotted, dict.fromkeys(slotted, timeline_trace), record_slots=True)
    ctx.tick()
    for name, result in results.items():
        result.disturbance = dist[name]
        result.spikes = disturbance.spikes(dist[name], seed=config.seed)[1]
        result.timeline = timelines.get(name)
    return times


def settle(ctx: RunContext, engines: dict[str, Engine], trace: traces.ArrivalTrace) -> None:
    """Unrecorded paired runs of `trace` until a steady clock's baseline comes from its
    gauge's turns between the engines' steps (engines.bench.host.steady); each run gives the gauge
    at least one turn. Nothing to do on the other clocks."""
    runs = 0
    source = ctx.time_source
    while isinstance(source, SteadyTime) and not source.settled:
        ctx.paired(engines, dict.fromkeys(engines, trace), id_suffix=f"settle#{runs}")
        runs += 1


def closed_stage(ctx: RunContext, engines: dict[str, Engine], trace: traces.ArrivalTrace,
                 config: Config, *,
                 sample: Callable[[], None] | None = None) -> dict[str, EngineResult]:
    """The closed protocol, paired: `config.warmup` unrecorded runs of `trace`, then
    `config.runs` recorded ones; the first stage of a comparison and all of `closed`.
    sample: called after the warm-ups and after each recorded run (`closed` times its
    ceiling there, in the recorded runs' minutes; a compiled engine's warm-up compiles)."""
    if ctx.bar is not None:
        ctx.bar.stage("closed runs", config.warmup + config.runs)
    warmup = config.warmup
    source = ctx.time_source
    if isinstance(source, SteadyTime) or sample is not None:
        ctx.with_(tag="w").closed(engines, trace, warmup=warmup, runs=0)
        warmup = 0
    if isinstance(source, SteadyTime):
        # The steady clock's baseline from turns after the warm-ups, not among fresh
        # engines' first steps, whose one-off costs (allocations, first shapes) are no part
        # of the host's speed.
        source.resettle()
        settle(ctx, engines, trace)
    if sample is not None:
        sample()
    closed = ctx.closed(engines, trace, warmup=warmup, runs=config.runs, after_run=sample)
    return {name: EngineResult(name, runs, closed_summaries=[summarize(r) for r in runs])
            for name, runs in closed.items()}


def compare(factories: dict[str, EngineFactory], config: Config, *,
            show_progress: bool = False) -> Comparison:
    """Build every engine and benchmark them all on the same draws and traces, paired."""
    with progress(show_progress) as bar:
        bar.stage("building engines", len(factories), unit="engine")
        return run(build(factories, bar), config, bar=bar)


def run(engines: dict[str, Engine], config: Config, *, bar: Progress | None = None,
        timer: Timer | None = None, steady: SteadyTime | None = None,
        time_source: TimeSource | None = None) -> Comparison:
    """Benchmark built engines (drained) on the same draws and traces, paired. `timer`
    replaces the preset's forward as the targets' timer and the kit's gauge, `steady` the
    steady clock, `time_source` the config's clock and the one the kit's gauge keeps its
    share on (tests: modelled ones, on a virtual clock the fake engines advance)."""
    max_model_len, vocab_size = scale(engines)
    mixed = functools.partial(draws.mixed, max_model_len=max_model_len, vocab_size=vocab_size)
    kit = host_kit.build(config, max_model_len, timer=timer, steady=steady, now=time_source)
    ctx = context(config, vocab_size, bar=bar, kit=kit, time_source=time_source)
    slo, once = targets(config, max_model_len, timer, kit)
    gauge = kit.gauge if kit is not None else None
    closed_trace = traces.closed(mixed(config.closed_requests, seed=config.seed), tag="closed")
    results = closed_stage(ctx, engines, closed_trace, config)
    drifts = [_replica(ctx, engines, results, config, slo, mixed, closed_trace, replica, gauge)
              for replica in range(config.replicas)]
    mix = _disturbance(ctx, engines, results, config, mixed, max_model_len, vocab_size, gauge)
    top, hardware = headline(slo, once)
    for result in results.values():
        result.reference_summaries = [summarize(r, slo=top) for r in result.references
                                      if r is not None]
    gauged = kit.steady if kit is not None else None
    return Comparison(config, top, hardware, results, slo,
                      {name: describe(name, engine) for name, engine in engines.items()},
                      reference_drift=drifts,
                      steady_baseline_s=gauged.baseline_s if gauged else None,
                      host_speed=gauged.speed_range() if gauged else None,
                      disturbance_times=mix)
