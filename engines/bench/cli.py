"""`python -m engines.bench` / `batching-bench`: compare engines and write tables and plots.

  batching-bench [compare] [--quick] [--engine [label=]module:callable ...] [--out DIR]
  batching-bench closed [--preset tiny]     # the 32-request closed mix, incl. HF generate
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from engines.bench import comparison, draws, traces
from engines.bench.metrics import SLO, summarize, write_csv
from engines.bench.paired import run_closed_paired
from engines.factories import EngineSpecError, load_labeled
from engines.models import PRESETS

TABLE_COLUMNS = {
    "engine": "engine",
    "capacity_rps": "capacity req/s",
    "output_tokens_per_s": "tok/s (closed)",
    "ttft_p95_s": "TTFT p95 s",
    "queue_wait_p50_s": "queue p50 s",
    "itl_p50_s": "ITL p50 s",
    "itl_spike_ratio": "ITL spike x",
    "wasted_slot_steps": "wasted slot-steps",
    "driver_overhead_pct": "driver %",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="batching-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=["compare", "closed"], default="compare")
    p.add_argument("--engine", action="append", default=[], metavar="[LABEL=]MODULE:CALLABLE",
                   help="a zero-argument callable returning a fresh engine (repeatable); "
                        "default: static vs continuous on --preset")
    p.add_argument("--preset", help=f"model for the default engines: {', '.join(PRESETS)} or "
                                    "a checkpoint dir (default: tiny on CPU, "
                                    "qwen2.5-1.5b on CUDA)")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", help="float32, float16, bfloat16 (default: per device)")
    p.add_argument("--max-batch-size", type=int, help="slots for the default engines (8)")
    p.add_argument("--quick", action="store_true", help="small draws: about a minute on 2 CPUs")
    p.add_argument("--requests", type=int, help="requests per capacity probe")
    p.add_argument("--warmup", type=int, help="closed runs: unrecorded warm-ups (2)")
    p.add_argument("--runs", type=int, help="closed runs: recorded runs (5)")
    p.add_argument("--iterations", type=int, help="capacity: bisection steps")
    p.add_argument("--rate", type=float, help="reference arrival rate for the latency columns "
                                             "(default: 0.8 x the best capacity)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the CPU presets gain nothing from more, "
                        "and oversubscribed spin-waits on a shared machine wreck the timings)")
    p.add_argument("--slo-ttft", type=float, help="goodput SLO on TTFT, seconds")
    p.add_argument("--slo-tpot", type=float, help="goodput SLO on mean ITL, seconds")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-hf", action="store_true", help="closed: skip the HF generate baseline")
    p.add_argument("--no-progress", action="store_true")
    return p


def _config(args: argparse.Namespace) -> comparison.Config:
    config = comparison.Config.for_hardware(
        quick=args.quick, device=args.device, preset=args.preset, dtype=args.dtype,
        max_batch_size=args.max_batch_size, seed=args.seed, capacity_requests=args.requests,
        reference_rps=args.rate, warmup=args.warmup, runs=args.runs, iterations=args.iterations)
    if args.slo_ttft is not None or args.slo_tpot is not None:
        slo = SLO(args.slo_ttft or config.slo.ttft_s, args.slo_tpot or config.slo.tpot_s)
        fields = {f: getattr(config, f) for f in config.__slots__}
        config = comparison.Config(**{**fields, "slo": slo})
    return config


def _factories(args: argparse.Namespace,
               config: comparison.Config) -> dict[str, comparison.EngineFactory]:
    if not args.engine:
        return comparison.default_engines(config)
    return dict(load_labeled(spec) for spec in args.engine)


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float | np.floating) else str(value)


def format_table(summary: pd.DataFrame) -> str:
    table = summary[[c for c in TABLE_COLUMNS if c in summary]].rename(columns=TABLE_COLUMNS)
    return table.to_string(index=False, formatters=dict.fromkeys(table.columns, _fmt))


def cmd_compare(args: argparse.Namespace) -> int:
    config = _config(args)
    started = time.perf_counter()
    print(f"batching-bench: preset {config.preset} on {config.device} ({config.dtype}), "
          f"{config.max_batch_size} slots, seed {config.seed}", file=sys.stderr)
    summary, results = comparison.compare(_factories(args, config), config,
                                     show_progress=not args.no_progress)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_csv(summary, out / "summary.csv")
    for name, frame in comparison.frames(results, config).items():
        write_csv(frame, out / f"{name}.csv")
    for result in results.values():
        if result.reference is not None:
            result.reference.trace.save(out / "trace-reference.json")
        result.disturbance.trace.save(out / "trace-disturbance.json")
    if not args.no_plots:
        from engines.bench import plots

        plots.rate_plot(comparison.frames(results, config)["probes"], out / "rate.png")
        timelines = [r.timeline for r in results.values() if r.timeline is not None]
        if timelines:
            plots.slot_timeline(timelines, out / "slot_timeline.png")
    print(format_table(summary))
    caps = summary.set_index("engine")["capacity_rps"]
    for result in results.values():
        print(f"capacity {result.name}: {result.capacity.low:.4g} req/s, bracket "
              f"{result.capacity.bracket()}, {len(result.capacity.probes)} probes")
    if {"static", "continuous"} <= set(caps.index) and caps["static"] > 0:
        print(f"capacity ratio continuous/static: {caps['continuous'] / caps['static']:.2f}x")
    print(f"stability rule: {next(iter(results.values())).capacity.rule}")
    print(f"wrote {out}/ in {time.perf_counter() - started:.0f} s")
    return 0


def cmd_closed(args: argparse.Namespace) -> int:
    """The foundation issue's comparison: 32 requests, prompts 4-256, budgets 1-64, 8 slots."""
    config = _config(args)
    factories = _factories(args, config)
    if not args.no_hf:
        from engines.bench.hf_baseline import HFGenerateEngine

        factories["hf-generate"] = functools.partial(
            HFGenerateEngine, config.preset, device=config.device, dtype=config.dtype)
    engines = comparison.build(factories)
    _, vocab_size = comparison.scale(engines)
    items = draws.closed_mix(vocab_size=vocab_size, seed=config.seed)
    trace = traces.closed(items, tag="cmp")
    print(f"closed: {draws.describe(items)}; preset {config.preset}, "
          f"{config.warmup} warm-up + {config.runs} recorded runs", file=sys.stderr)
    rows = []
    with comparison.progress(not args.no_progress) as bar:
        bar.stage("closed runs, paired")
        paired = run_closed_paired(engines, trace, warmup=config.warmup, runs=config.runs,
                                   on_run=bar.tick)
    for name, runs in paired.items():
        rates = [summarize(r)["output_tokens_per_s"] for r in runs]
        rows.append({"engine": name, "output_tokens_per_s": float(np.median(rates)),
                     "min": min(rates), "max": max(rates),
                     "wall_s": float(np.median([r.wall_s for r in runs])),
                     "driver_overhead_pct": 100 * sum(r.driver_s for r in runs)
                     / sum(r.step_s for r in runs)})
    table = pd.DataFrame(rows)
    if "hf-generate" in set(table["engine"]):
        base = table.set_index("engine").loc["hf-generate", "output_tokens_per_s"]
        table["vs_hf_generate"] = table["output_tokens_per_s"] / base
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(table, args.out / "closed.csv")
    print(table.to_string(index=False, formatters=dict.fromkeys(table.columns, _fmt)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        return cmd_closed(args) if args.command == "closed" else cmd_compare(args)
    except EngineSpecError as exc:  # a bad --engine: say which and why, no traceback
        parser.error(str(exc))


if __name__ == "__main__":
    raise SystemExit(main())
