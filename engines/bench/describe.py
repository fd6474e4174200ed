"""What the bench says about an engine: only what the engine itself reports through the
protocol (vocab, context) and, where it offers them, how many requests it runs at once:
`max_batch_size` under SlotIntrospection, else a declared `max_concurrency`, else unknown;
the CPU threads it computes with (a declared `compute_threads`, else unknown) and how it
executes (a declared `execution`, e.g. eager or compiled). Never the CLI's --preset or
--max-batch-size, which configure the default engines only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from engines.bench import clocks
from engines.bench.declarations import compute_threads, execution
from engines.protocol import Engine, SlotIntrospection, capabilities_of


@dataclass(frozen=True, slots=True)
class EngineDescription:
    name: str
    vocab_size: int
    max_model_len: int
    concurrency: int | None  # requests at once, as the engine declares it; None: not declared
    source: str  # where `concurrency` came from
    threads: int | None = None  # CPU threads it computes with (compute_threads); None: unknown
    execution: str = ""  # how it runs, as it declares it (execution); "": not declared

    def line(self) -> str:
        if self.concurrency is None:
            runs = f"concurrency unknown ({self.source})"
        else:
            runs = f"{self.concurrency} requests at once ({self.source})"
        threads = ("compute threads unknown (no compute_threads)" if self.threads is None
                   else f"{self.threads} compute thread{'s' * (self.threads != 1)}")
        how = f", {self.execution}" if self.execution else ""
        return (f"{self.name}: vocab {self.vocab_size}, context {self.max_model_len}, {runs}, "
                f"{threads}{how}")


def describe(name: str, engine: Engine) -> EngineDescription:
    slots = getattr(engine, "max_batch_size", None)
    declared = capabilities_of(engine).max_concurrency
    if isinstance(engine, SlotIntrospection) and _count(slots):
        concurrency, source = int(slots), "max_batch_size, SlotIntrospection"
    elif _count(declared):
        concurrency, source = int(declared), "max_concurrency"
    else:
        concurrency, source = None, "no SlotIntrospection, no max_concurrency"
    return EngineDescription(name, int(engine.vocab_size), int(engine.max_model_len),
                             concurrency, source, compute_threads(engine), execution(engine))


def unequal_threads(engines: dict[str, EngineDescription]) -> str:
    """A line saying the engines compute on different (or unknown) thread counts, or ""."""
    counts = {d.threads for d in engines.values()}
    if len(engines) < 2 or len(counts) == 1 and None not in counts:
        return ""
    each = ", ".join(f"{name} {'unknown' if d.threads is None else d.threads}"
                     for name, d in engines.items())
    return (f"  compute threads differ or are unknown ({each}): the engines' ratios are not "
            "at equal cores")


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def banner(engines: dict[str, EngineDescription], *, preset: str, device: str, dtype: str,
           max_batch_size: int, seed: int, default: bool, slo_given: bool,
           clock: str = "wall", host: bool = False) -> str:
    """What the run compares, as the engines report it, and what --preset is used for."""
    lines = [f"batching-bench: {len(engines)} engines, seed {seed}, timed in "
             f"{clocks.describe(clock)} (--clock {clock})"]
    lines += [f"  {d.line()}" for d in engines.values()]
    if unequal := unequal_threads(engines):
        lines.append(unequal)
    model = f"preset {preset} ({dtype} on {device})"
    if default:
        lines.append(f"  the default engines (DEFAULT_ENGINES, engines/bench/config.py) on {model},"
                     f" {max_batch_size} slots")
    else:
        lines.append("  engines from --engine: --preset, --device, --dtype and --max-batch-size "
                     "do not configure them")
    if slo_given:
        lines.append("  SLO targets: given (--slo-ttft, --slo-itl)")
    else:
        when = ("between the engines' steps in every probe round (the noisy-host kit)" if host
                else "once, before the run")
        lines.append(f"  SLO targets: timed on {model}, transformers forward, "
                     f"{max_batch_size}-row decode step and long prefill, {when}; not on the "
                     "engines under test")
    return "\n".join(lines)
