"""What one comparison measures and on what: the preset follows the hardware, sizes follow
--quick, and the engines of the default comparison are listed once, here."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from engines.bench.clocks import ON_THREAD, check, on_thread
from engines.bench.devices import default_device
from engines.bench.doubles.slowdown import SlowedEngine, planted
from engines.bench.table import TIE
from engines.factories import load_factory
from engines.protocol import Engine

EngineFactory = Callable[[], Engine]
QUICK_SEARCH_TIE = 1.3

# The default comparison: row name -> engine class, built on the preset's model with the
# config's device, dtype and slots. One line adds an engine to every default run (CLI and asv).
DEFAULT_ENGINES: dict[str, str] = {
    "static": "engines.slot.static:StaticBatchEngine",
    "continuous": "engines.slot.continuous:ContinuousBatchEngine",
    # The same KV memory as the slot engines, shared by twice the seats (the point of paging).
    "paged": "engines.paged.variants:equal_memory",
}


@dataclass(frozen=True, slots=True)
class Config:
    preset: str = "tiny"
    device: str = "cpu"
    dtype: str = "float32"
    max_batch_size: int = 8
    seed: int = 0
    capacity_requests: int = 400  # per probe, as the write-up's traces (docs/references.md)
    iterations: int = 5  # capacity: bisection steps after the bracket holds
    # goodput: bisection steps after the bracket holds; 5 halvings of a factor-2 bracket
    # leave 2.2%, as capacity's, where 3 left 9%: a 10% lead would be lost in the grid
    goodput_iterations: int = 5
    # goodput: halvings below capacity before it is reported as under the last one tried (a
    # [0, capacity / 2^n) bracket). Each halving's probes cost more than the last (a lower
    # rate batches less: more steps for the same requests), so this bounds the search's cost.
    goodput_halvings: int = 5
    # A failing probe round is re-run, paired, this many times (the wall clock's default;
    # for_hardware takes 0 with the CPU-time clocks).
    retries: int = 1
    # Capacity and goodput: engines within this factor of a row's best share its win
    # (engines.bench.table). The full run's is the table's TIE; for_hardware sets --quick's
    # from its measured run-to-run spread.
    search_tie: float = TIE
    closed_requests: int = 32
    warmup: int = 2
    runs: int = 5
    # disturbance: requests per prompt-length class. 24, not 8: continuous batching's spike
    # over 7 admissions of the long class moved 4.5-6.3x between quick runs (a ratio of two
    # medians over 7 steps), past the 20% the stability check allows; the run costs seconds.
    admissions_per_class: int = 24
    slo_ttft_s: float | None = None  # default: derived from the hardware (engines.bench.slo)
    slo_itl_s: float | None = None
    slo_attainment: float = 0.9
    # Latency columns: each engine at this x its own closed-batch request rate (its throughput
    # with every request queued). Half, not 0.8 x capacity: queueing grows as load / (1 - load),
    # so at 0.8 a rate 5% off or a machine 10% slower by the time the reference runs moves
    # every latency by 25-80%; at 0.5, by 10-20%.
    reference_load: float = 0.5
    reference_rps: float | None = None  # or every engine at this one rate
    # Requests of the reference run (the latency columns); None: twice a probe's, so that a
    # p95 rests on 2x the requests a probe's would.
    reference_requests: int | None = None
    replicas: int = 1  # independent capacity and goodput searches (asv's samples)
    # what engine clocks count: "wall", "cpu" or "steady" (engines.bench.clocks)
    clock: str = "wall"
    # the noisy-host kit (engines.bench.host): its gauge between the steps, per-round targets,
    # re-timing and drift; always on under the cpu and steady clocks, which are its own
    host: bool = False
    # Every paired run sends prompts of its own (engines.bench.fresh), so no run finds an
    # earlier one's in a prefix cache; False (--exact-prompts): the trace's prompts as drawn.
    fresh_prompts: bool = True

    @property
    def host_kit(self) -> bool:
        return self.host or on_thread(self.clock)

    def __post_init__(self) -> None:
        for name in ("capacity_requests", "closed_requests", "runs", "replicas",
                     "max_batch_size", "admissions_per_class", "goodput_halvings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not self.search_tie >= 1:
            raise ValueError(f"search_tie: must be a factor >= 1, got {self.search_tie}")
        if self.retries < 0:
            raise ValueError(f"retries: must be >= 0, got {self.retries}")
        if not 0 < self.reference_load <= 1:
            raise ValueError(f"reference_load: must be in (0, 1], got {self.reference_load}")
        if self.reference_requests is not None and self.reference_requests < 1:
            raise ValueError(f"reference_requests: must be >= 1, got {self.reference_requests}")
        for name in ("slo_ttft_s", "slo_itl_s", "reference_rps"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: must be > 0 seconds or req/s, got {value}")
        if not 0 < self.slo_attainment <= 1:
            raise ValueError(f"slo_attainment: must be in (0, 1], got {self.slo_attainment}")
        check(self.clock)  # names the bad value
        if on_thread(self.clock) and not self.device.startswith("cpu"):
            raise ValueError(f"clock: {self.clock!r} times work on this thread only; device "
                             f"{self.device!r} needs 'wall'")

    @classmethod
    def for_hardware(cls, *, quick: bool = False, device: str | None = None,
                     **overrides: Any) -> Config:
        """tiny in fp32 without a GPU; qwen2.5-1.5b in bf16 on CUDA (Qwen2.5 is bf16-native;
        --dtype float16 still selects fp16). Overrides that are None are ignored."""
        device = device or default_device()
        base: dict[str, Any] = (
            {"preset": "qwen2.5-1.5b", "device": device, "dtype": "bfloat16"}
            if device.startswith("cuda") else
            {"preset": "tiny", "device": device, "dtype": "float32"}
        )
        if quick:
            # Brackets 4.4% wide (the table's ties are 5%); goodput searched down to
            # capacity / 16: static batching's is about capacity / 9 under the default SLO.
            # Fewer bisection steps; probes of 300 requests, not 400: a capacity verdict is a
            # latency slope over the probe's span, whose noise falls as requests^1.5, and
            # 150-request probes moved paged's capacity by 10% between runs, enough to tie it
            # with continuous's. The reference run keeps the full run's size (2 x 400): its
            # medians are sub-step waits (continuous batching's median queue wait is under
            # half a step), which moved by 1.3x between quick runs on 300 requests
            # (scripts/bench_stability.sh, docs/benchmarks.md).
            # Capacity and goodput tie within 1.3x: across 21 quick runs on two 2-core VMs
            # (scripts/bench_stability.sh), paged's capacity over continuous's was 0.95-1.26x
            # and its goodput 0.89-1.23x, the same code and engines each time, so a lead
            # under 1.3x is one a second quick run may reverse (docs/benchmarks.md).
            base.update(capacity_requests=300, iterations=4, goodput_iterations=4,
                        goodput_halvings=4, reference_requests=800, search_tie=QUICK_SEARCH_TIE)
            if device.startswith("cuda"):  # a 1.5B step is ~10 ms: keep the run in minutes
                base.update(capacity_requests=48, iterations=3, goodput_iterations=2,
                            admissions_per_class=6, reference_requests=None)
        if overrides.get("clock") in ON_THREAD:
            # A retry is for a slow spell, which the wall clock counts and this thread's CPU
            # time does not (engines/bench/clocks.py). Here a second try is only a second
            # draw of the same noise, and "passes if any try passed" would bias every
            # bracket upwards by it.
            base["retries"] = 0
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def with_(self, **changes: Any) -> Config:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"Config has no field {sorted(unknown)}")
        return replace(self, **changes)


def default_engines(config: Config) -> dict[str, EngineFactory]:
    """DEFAULT_ENGINES on the config's model; BENCH_SLOWDOWN (engines.bench.doubles.slowdown)
    wraps them in a planted slowdown."""
    kwargs = {"model": config.preset, "device": config.device, "dtype": config.dtype,
              "max_batch_size": config.max_batch_size}
    factories: dict[str, EngineFactory] = {}
    for name, spec in DEFAULT_ENGINES.items():
        make = functools.partial(load_factory(spec), **kwargs)
        fraction = planted(name)
        if fraction:
            if name not in _WARNED:  # once per process: asv builds engines per sample
                _WARNED.add(name)
                print(f"batching-bench: PLANTED SLOWDOWN: {name} steps {fraction:.0%} slower",
                      file=sys.stderr)
            make = functools.partial(_slowed, make, fraction)
        factories[name] = make
    return factories


_WARNED: set[str] = set()


def _slowed(make: EngineFactory, fraction: float) -> Engine:
    return SlowedEngine(make(), fraction)
