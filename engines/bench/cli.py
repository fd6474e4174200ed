"""`python -m engines.bench` / `batching-bench`: compare engines and write tables and plots.

  batching-bench [compare] [--quick] [--engine [label=]module:callable ...] [--out DIR]
  batching-bench closed [--preset tiny]     # the 32-request closed mix, incl. HF generate,
                                            # each engine's share of this core's ceiling
  batching-bench replay --engine ... --rates 1,2  # each engine alone at given rates (servers)
  batching-bench render [--out DIR]  # the table, CSVs and plots again from DIR/report.json

Without --engine, compare runs the default engines ({defaults}) on --preset. With --engine,
only the engines given run; --preset then sets only the model the SLO targets are timed on
(its transformers forward, between the engines' steps): for an engine that does not run that
model, give targets of its own with --slo-ttft and --slo-itl.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from engines.bench import clocks, comparison, draws, fresh, output, rates, traces
from engines.bench.config import DEFAULT_ENGINES, Config, EngineFactory, default_engines
from engines.bench.describe import banner, describe, unequal_threads
from engines.bench.devices import default_device
from engines.bench.host import kit as host_kit
from engines.bench.host import priority
from engines.bench.metrics import overhead_pct
from engines.bench.progress import progress
from engines.bench.record import ClosedRow
from engines.bench.record import rows as record_rows
from engines.bench.run_report import FILE, Report, publish, records
from engines.bench.shares import CeilingRun
from engines.bench.streaming import streams
from engines.factories import EngineSpecError, load_factory, load_labeled
from engines.models import PRESETS
from engines.protocol import Engine
from engines.threads import THREADS_ENV

HF_GENERATE = "engines.adapters.hf.generate:HFGenerateEngine"  # `closed`'s baseline
BASELINE = "hf-generate"  # its label there
# Measured, not promised: the --quick run on the CPU preset, by scripts/bench_stability.sh.
HOST_MODES = ("auto", "on", "off")
QUICK_HELP = ("small draws (300-request probes, brackets 4.4%% wide, one try per rate on the "
              "CPU-time clocks, capacity and goodput tied within 1.3x, an 800-request "
              "reference run): measured 122-134 s wall on 2 cores, its stepping thread under "
              "SCHED_FIFO (--priority), quiet and beside two busy loops (load 0.9-3.2); "
              "131-222 s on a VM whose own speed moved 2x (the steady clock)")


def _parser() -> argparse.ArgumentParser:
    defaults = ", ".join(DEFAULT_ENGINES)
    doc = (__doc__ or "").format(defaults=defaults)
    p = argparse.ArgumentParser(prog="batching-bench", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=["compare", "closed", "replay", "render"],
                   default="compare")
    p.add_argument("--engine", action="append", default=[], metavar="[LABEL=]MODULE:CALLABLE",
                   help="a zero-argument callable returning a fresh engine (repeatable); "
                        f"default: the default engines, {defaults}, on --preset")
    p.add_argument("--preset", help=f"model of the default engines and of the SLO's timings "
                                    f"(with --engine, of the timings only): "
                                    f"{', '.join(PRESETS)} or a checkpoint dir (default: tiny "
                                    "on CPU, qwen2.5-1.5b on CUDA)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", help="float32, float16, bfloat16 (default: float32 on CPU, "
                                   "bfloat16 on CUDA)")
    p.add_argument("--max-batch-size", type=int,
                   help="slots of the default engines, rows of the SLO's decode step (8)")
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--requests", type=int, help="requests per capacity probe")
    p.add_argument("--warmup", type=int, help="closed runs: unrecorded warm-ups (2)")
    p.add_argument("--runs", type=int, help="closed runs: recorded runs (5)")
    p.add_argument("--iterations", type=int, help="capacity: bisection steps")
    p.add_argument("--replicas", type=int, help="independent capacity/goodput searches (1)")
    p.add_argument("--retries", type=int,
                   help="capacity and goodput: paired re-runs of a failing verdict before it "
                        "counts (default: 1 on the wall clock, 0 on the cpu and steady clocks)")
    p.add_argument("--search-tie", type=float, metavar="FACTOR",
                   help="capacity and goodput: engines within this factor of the best share "
                        "the win (default 1.05; --quick: 1.3, how far its searches moved between "
                        "runs)")
    p.add_argument("--rate", type=float, help="latency columns: every engine at this rate "
                                             "(default: each at 0.5 x its own closed-batch "
                                             "request rate; the kit re-times it just "
                                             "before the run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clock", choices=["auto", *clocks.NAMES], default="auto",
                   help="what the engines' clocks count: wall time; the CPU time of the "
                        "thread stepping them, which time slices given to other processes do "
                        "not advance (cpu); or that CPU time rescaled by the host's own speed, "
                        "timed between the steps, as a CPU that keeps its speed would count it "
                        "(steady; engines/bench/clocks.py, engines/bench/host/steady.py). auto: "
                        "steady where the noisy-host kit is on for the default engines on CPU "
                        "with --threads 1, else wall. cpu and steady are the kit's (they turn "
                        "it on) and right only for engines doing all their work on that "
                        "thread")
    p.add_argument("--host", choices=HOST_MODES, default="auto",
                   help="the noisy-host kit (engines/bench/host/): its gauge between the "
                        "engines' steps (per-round SLO targets, the steady clock, drift), "
                        "SCHED_FIFO and the re-timed reference rate. auto: on for --quick of "
                        "the default engines on a CPU (said in the output), else off: the "
                        "wall clock, targets timed once before the run")
    p.add_argument("--priority", choices=priority.MODES, default="auto",
                   help="auto: under the cpu or steady clock, step the engines on a "
                        "SCHED_FIFO thread where the OS permits it, so that no other process "
                        "on the core preempts a step (a preempted step resumes with cold "
                        "caches, which the cpu clock counts; engines/bench/host/priority.py); "
                        "realtime: that or an error; normal: never")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the CPU presets gain nothing from more, "
                        "and oversubscribed spin-waits on a shared machine wreck the timings)")
    p.add_argument("--slo-ttft", type=float, metavar="S",
                   help="goodput target on TTFT, seconds, in every round (default: 3 x the "
                        "preset's longest-prompt prefill, timed once before the run; with "
                        "--host on, in each probe round)")
    p.add_argument("--slo-itl", type=float, metavar="S",
                   help="goodput target on a request's mean ITL, seconds, in every round "
                        "(default: 5 x the preset's full-batch decode step, timed as "
                        "--slo-ttft's)")
    p.add_argument("--slo-tpot", type=float, help=argparse.SUPPRESS)  # deprecated: --slo-itl
    p.add_argument("--slo-attainment", type=float, metavar="SHARE",
                   help="share of requests that must meet both targets (0.9)")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-hf", action="store_true", help="closed: skip the HF generate baseline")
    p.add_argument("--no-ceiling", action="store_true",
                   help="closed: skip the ceiling (the batch's arithmetic at the rate of the "
                        "fastest GEMM on the preset's shapes, timed after the warm-ups and each "
                        "recorded run, engines/bench/shares.py) and each engine's share of it")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--exact-prompts", action="store_true",
                   help="send every run the trace's prompts as drawn: a prefix cache then keeps "
                   "earlier runs' prompts, and the closed runs and probes measure it warm "
                   "(default: each run's prompts its own, engines/bench/fresh.py)")
    rates.add_arguments(p)
    return p


def host(args: argparse.Namespace, device: str) -> tuple[bool, str]:
    """Whether the noisy-host kit is on, and why, as the output says it."""
    on_thread = args.clock in clocks.ON_THREAD
    if args.host == "off":
        if on_thread:
            raise ValueError(f"--clock {args.clock}: the noisy-host kit's clock, which "
                             "--host off turns off")
        return False, "off (--host off): the wall clock, targets timed once before the run"
    if args.host == "on":
        return True, "on (--host on)"
    if on_thread:
        return True, f"on (--clock {args.clock} is its clock)"
    if args.quick and device.startswith("cpu") and not args.engine:
        return True, ("on (--quick of the default engines on a CPU: a shared host's speed "
                      "moves under a short run; --host off turns it off)")
    return False, "off: the wall clock, targets timed once before the run (--host on)"


def _clock(args: argparse.Namespace, device: str) -> str:
    if args.clock != "auto":
        if args.clock in clocks.ON_THREAD and args.threads != 1:
            raise ValueError(f"--clock {args.clock}: needs --threads 1 (torch's other threads "
                             f"are not on this thread's clock), got --threads {args.threads}")
        return str(args.clock)
    in_thread = device.startswith("cpu") and args.threads == 1 and not args.engine
    return "steady" if in_thread and host(args, device)[0] else "wall"


def _config(args: argparse.Namespace) -> Config:
    itl = args.slo_itl
    if args.slo_tpot is not None:
        print("batching-bench: --slo-tpot is deprecated; use --slo-itl", file=sys.stderr)
        itl = args.slo_tpot if itl is None else itl
    device = args.device or default_device()
    return Config.for_hardware(
        quick=args.quick, device=device, clock=_clock(args, device), preset=args.preset,
        host=host(args, device)[0],
        dtype=args.dtype,
        max_batch_size=args.max_batch_size, seed=args.seed, capacity_requests=args.requests,
        reference_rps=args.rate, warmup=args.warmup, runs=args.runs, iterations=args.iterations,
        replicas=args.replicas, retries=args.retries,
        search_tie=args.search_tie, slo_ttft_s=args.slo_ttft, slo_itl_s=itl,
        slo_attainment=args.slo_attainment, fresh_prompts=not args.exact_prompts)


def _factories(args: argparse.Namespace, config: Config) -> dict[str, EngineFactory]:
    if not args.engine:
        return default_engines(config)
    return dict(load_labeled(spec) for spec in args.engine)


def cmd_compare(args: argparse.Namespace) -> int:
    config = _config(args)
    started = time.perf_counter()
    factories = _factories(args, config)
    with (progress(not args.no_progress) as bar,
          priority.stepping_priority(args.priority, config.clock) as scheduling):
        bar.stage("building engines", len(factories), unit="engine")
        engines = comparison.build(factories, bar)
        bar.close()
        _servers_need_targets(engines, config)
        print(banner({name: describe(name, e) for name, e in engines.items()},
                     preset=config.preset, device=config.device, dtype=config.dtype,
                     max_batch_size=config.max_batch_size, seed=config.seed,
                     default=not args.engine, clock=config.clock, host=config.host_kit,
                     slo_given=config.slo_ttft_s is not None and config.slo_itl_s is not None),
              file=sys.stderr)
        kit = f"noisy-host kit: {host(args, config.device)[1]}"
        prompts = fresh.note(config.fresh_prompts)
        print(f"  {kit}\n  scheduling: {scheduling.note}\n  {prompts}", file=sys.stderr)
        result = comparison.run(engines, config, bar=bar)
    found = output.write(result, args.out, plots=not args.no_plots,
                         notes=[kit, f"scheduling: {scheduling.note}", prompts])
    print(found.text())
    print(f"wrote {args.out}/ in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    """The table, CSVs and plots again from a saved report (--out DIR/report.json)."""
    path = args.out / FILE
    if not path.is_file():
        raise ValueError(f"render: no {FILE} in {args.out} (--out names the folder of a "
                         "compare, closed or replay run)")
    publish(Report.load(path), args.out, plots=not args.no_plots)
    return 0


def _servers_need_targets(engines: dict[str, Engine], config: Config) -> None:
    """A server runs alone, with no yardstick between its steps (engines.bench.paired), and
    on the wall clock: its SLO targets must be given."""
    served = [name for name, engine in engines.items() if streams(engine)]
    if served and (config.slo_ttft_s is None or config.slo_itl_s is None):
        raise ValueError(f"--slo-ttft and --slo-itl: {', '.join(served)} stream(s) from a "
                         f"server, which runs alone, with no yardstick timed between its "
                         f"steps: give both targets (or use `replay --rates`)")
    if served and clocks.on_thread(config.clock):
        raise ValueError(f"--clock {config.clock}: {', '.join(served)} compute(s) in a "
                         f"server, which this thread's CPU time does not count: use --clock "
                         f"wall")


def cmd_replay(args: argparse.Namespace) -> int:
    """Each engine alone at the rates given (engines.bench.rates)."""
    config = _config(args)
    engines = comparison.build(_factories(args, config))
    return rates.cmd_replay(args, engines, asdict(config))


def cmd_closed(args: argparse.Namespace) -> int:
    """The foundation issue's comparison: 32 requests, prompts 4-256, budgets 1-64, 8 slots."""
    config = _config(args)
    factories = _factories(args, config)
    if not args.no_hf:
        # A baseline over a library, so an adapter: loaded by its spec, as any engine is.
        generate: Callable[..., Engine] = load_factory(HF_GENERATE)
        factories[BASELINE] = functools.partial(
            generate, config.preset, device=config.device, dtype=config.dtype)
    engines = comparison.build(factories)
    described = {name: describe(name, e) for name, e in engines.items()}
    for line in [d.line() for d in described.values()] + [unequal_threads(described)]:
        if line:
            print(f"  {line.strip()}", file=sys.stderr)
    _, vocab_size = comparison.scale(engines)
    items = draws.closed_mix(vocab_size=vocab_size, seed=config.seed)
    trace = traces.closed(items, tag="cmp")
    print(f"closed: {draws.describe(items)}; preset {config.preset}, "
          f"{config.warmup} warm-up + {config.runs} recorded runs", file=sys.stderr)
    ceiling = CeilingRun.plan(engines, items, preset=config.preset, device=config.device,
                              dtype=config.dtype, enabled=not args.no_ceiling)
    with (progress(not args.no_progress) as bar,
          priority.stepping_priority(args.priority, config.clock) as scheduling):
        print(f"  scheduling: {scheduling.note}\n  {fresh.note(config.fresh_prompts)}",
              file=sys.stderr)
        kit = host_kit.build(config, comparison.scale(engines)[0])
        ctx = comparison.context(config, vocab_size, bar=bar, kit=kit)
        # The ceiling's GEMM timed after the warm-ups and after every recorded run: the
        # host's speed in the same minutes, at the same load.
        results = comparison.closed_stage(ctx, engines, trace, config, sample=ceiling.sample)
    rows = []
    for name, result in results.items():
        rates = [s.output_tokens_per_s for s in result.closed_summaries]
        runs = result.closed
        rows.append(ClosedRow(
            engine=name, output_tokens_per_s=result.tokens_per_s, min=min(rates), max=max(rates),
            wall_s=float(np.median([r.wall_s for r in runs])),
            driver_overhead_pct=overhead_pct(runs),
            compute_threads=described[name].threads,
            # After the runs: a compiled engine says how many steps ran compiled.
            execution=describe(name, engines[name]).execution))
    base = {row.engine: row.output_tokens_per_s for row in rows}.get(BASELINE)
    if base is not None:  # numpy's division, as a frame's: a zero base gives inf
        rows = [replace(row, vs_hf_generate=float(np.float64(row.output_tokens_per_s) / base))
                for row in rows]
    rows = [_with_share(row, ceiling) for row in rows]
    notes = [fresh.note(config.fresh_prompts),
             *ceiling.notes({row.engine: row.output_tokens_per_s for row in rows})]
    if not config.fresh_prompts and ceiling.config is not None:
        notes.append("ceiling: counts every prompt token, which a prefix cache warm from "
                     "earlier runs (--exact-prompts) skips: a share above 100% is possible")
    table = pd.DataFrame(record_rows(rows))
    publish(Report(config=asdict(config), slo={}, summary=records(table), notes=notes,
                   kind="closed"), args.out, plots=False)
    return 0


def _with_share(row: ClosedRow, ceiling: CeilingRun) -> ClosedRow:
    found = ceiling.share(row.engine, row.output_tokens_per_s)
    if found is None:
        return row
    return replace(row, ceiling_dtype=found.dtype,
                   ceiling_tokens_per_s=found.ceiling_tokens_per_s, ceiling_share=found.share)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        # Library adapters built in this process take the same count (engines.threads), so
        # that a comparison with them is at equal cores.
        os.environ[THREADS_ENV] = str(args.threads)
    try:
        commands = {"closed": cmd_closed, "replay": cmd_replay, "compare": cmd_compare,
                    "render": cmd_render}
        return commands[args.command](args)
    except (EngineSpecError, ValueError) as exc:  # bad input: say which and why, no traceback
        parser.error(str(exc))


if __name__ == "__main__":
    raise SystemExit(main())
