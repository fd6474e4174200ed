"""`batching-bench replay`: each engine alone, open-loop, at the request rates given.

The comparison searches for capacity and goodput with dozens of probes; a server on a shared
CPU takes minutes for that. This replays one workload at the rates a user names, the way
serving benchmarks (GuideLLM, `vllm bench serve`) drive a server, and reports per rate what
a client sees: achieved rate, output tokens/s, TTFT and ITL percentiles. An engine that
streams (a server over HTTP) is timed by token arrival at the client (engines.bench.streaming).

Every engine runs alone, on the wall clock (no pairing: a server computes on its own clock),
after `warmup` unrecorded closed runs of the workload's first WARMUP_REQUESTS requests. The
workload is the comparison's mixed draw, or one fixed shape (--prompt-tokens and
--output-tokens), which --export-guidellm writes as a JSON-lines file GuideLLM reads
(docs/benchmarks.md, "Over HTTP, beside GuideLLM").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from engines.bench import clocks, draws, traces
from engines.bench.fresh import FreshPrompts, note
from engines.bench.metrics import requests_frame, tokens_frame, write_csv
from engines.bench.rate_profiles import SweepProfile, run_profiles
from engines.bench.record import COLUMN, REPLAY_COLUMNS, ReplayRow, rows
from engines.bench.replay import Run, WallClock
from engines.bench.run_context import RunContext
from engines.bench.run_report import Report, publish, records
from engines.protocol import Engine

WARMUP_REQUESTS = 8
COLUMNS = list(REPLAY_COLUMNS)  # replay.csv's, in order (engines.bench.record)


def parse_rates(text: str) -> list[float]:
    """'1,2.5,4' -> [1.0, 2.5, 4.0]; each must be a positive number."""
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise ValueError(f"--rates: {part!r} is not a number (in {text!r})") from None
        if not rate > 0:
            raise ValueError(f"--rates: every rate must be > 0 req/s, got {part!r}")
        rates.append(rate)
    return rates


def workload(n: int, *, max_model_len: int, vocab_size: int, seed: int,
             prompt_tokens: int | None = None,
             output_tokens: int | None = None) -> list[draws.WorkItem]:
    """The mixed draw, or n requests of one shape when both token counts are given."""
    if (prompt_tokens is None) != (output_tokens is None):
        raise ValueError("--prompt-tokens and --output-tokens: give both (one fixed shape) "
                         "or neither (the mixed draw)")
    if prompt_tokens is None or output_tokens is None:
        return draws.mixed(n, max_model_len=max_model_len, vocab_size=vocab_size, seed=seed)
    for name, value in (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)):
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if prompt_tokens + output_tokens > max_model_len:
        raise ValueError(f"--prompt-tokens + --output-tokens: {prompt_tokens} + {output_tokens} "
                         f"exceeds the engines' context ({max_model_len} tokens)")
    return draws.uniform(n, prompt_len=prompt_tokens, max_tokens=output_tokens,
                         vocab_size=vocab_size, seed=seed)


def replay(engines: dict[str, Engine], items: Sequence[draws.WorkItem], rates: Sequence[float],
           *, process: str = "poisson", seed: int = 0, warmup: int = 1,
           fresh: bool = True) -> tuple[pd.DataFrame, list[Run]]:
    """Each engine alone, on the wall clock: `warmup` closed runs, then one open-loop run per
    rate, in the order given (a SweepProfile, driven as the searches' profiles are), never
    given up on; `fresh`: every run's prompts its own (engines.bench.fresh). Returns one
    summary row per engine and rate, and the recorded runs."""
    replayed: list[ReplayRow] = []
    runs: list[Run] = []
    warm = traces.closed(items[:WARMUP_REQUESTS], tag="warm")
    for name, engine in engines.items():
        ctx = RunContext(clocks={name: WallClock()}, seed=seed, tag=process,
                         fresh=FreshPrompts(int(engine.vocab_size)) if fresh else None)
        alone = {name: engine}
        ctx.closed(alone, warm, warmup=warmup, runs=0)
        swept = run_profiles(ctx, alone, list(items), {name: SweepProfile(rates)}, "",
                             retries=0, on_probe=None, arrivals=process, give_up=False)
        for probe in swept[name].probes:
            replayed.append(ReplayRow(process=process, probe=probe.summary))
            runs.append(probe.run)
    table = pd.DataFrame(rows(replayed))
    return table[[c for c in COLUMNS if c in table.columns]], runs


def export_guidellm(items: Sequence[draws.WorkItem], path: Path) -> Path:
    """The workload as GuideLLM's JSON-lines data: each prompt as the words `t<id>` that the
    server checkpoints' WordLevel tokenizer (engines.adapters.http.convert) maps back to
    exactly these ids, with its token counts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for item in items:
            f.write(json.dumps({"prompt": " ".join(f"t{t}" for t in item.prompt_token_ids),
                                "prompt_tokens_count": item.prompt_len,
                                "output_tokens_count": item.max_tokens}) + "\n")
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("replay (each engine alone, open-loop, at given rates)")
    g.add_argument("--rates", metavar="R[,R...]", help="replay: request rates, req/s (required)")
    g.add_argument("--arrivals", choices=traces.AT_RATE, default="poisson",
                   help="replay: arrival process (default poisson)")
    g.add_argument("--prompt-tokens", type=int, help="replay: one fixed prompt length "
                                                     "(with --output-tokens)")
    g.add_argument("--output-tokens", type=int, help="replay: one fixed output length")
    g.add_argument("--export-guidellm", type=Path, metavar="PATH",
                   help="replay: also write the workload as GuideLLM JSON-lines data")


def cmd_replay(args: argparse.Namespace, engines: dict[str, Engine],
               config: dict[str, Any]) -> int:
    """Replay, then the run's report (kind replay: engines.bench.run_report) and its table;
    `config`: the run's Config's fields."""
    if not args.rates:
        raise ValueError("--rates: replay needs the request rates to replay, e.g. --rates 1,2")
    if args.clock in clocks.ON_THREAD:
        raise ValueError(f"--clock {args.clock}: replay runs every engine alone on the wall "
                         "clock")
    rates = parse_rates(args.rates)
    max_model_len = min(int(e.max_model_len) for e in engines.values())
    vocab_size = min(int(e.vocab_size) for e in engines.values())
    items = workload(args.requests or 100, max_model_len=max_model_len, vocab_size=vocab_size,
                     seed=args.seed, prompt_tokens=args.prompt_tokens,
                     output_tokens=args.output_tokens)
    if args.export_guidellm:
        print(f"wrote {export_guidellm(items, args.export_guidellm)}", file=sys.stderr)
    print(f"replay: {draws.describe(items)}; {args.arrivals} at {args.rates} req/s, each "
          f"engine alone on the wall clock", file=sys.stderr)
    fresh = bool(config.get("fresh_prompts", True))
    table, runs = replay(engines, items, rates, process=args.arrivals, seed=args.seed,
                         warmup=1 if args.warmup is None else args.warmup, fresh=fresh)
    rate = COLUMN.offered_rps  # each run's, beside its requests and tokens
    write_csv(pd.concat([requests_frame(r).assign(**{rate: r.trace.rate}) for r in runs]),
              args.out / "requests.csv")
    write_csv(pd.concat([tokens_frame(r).assign(**{rate: r.trace.rate}) for r in runs]),
              args.out / "tokens.csv")
    found = Report(config={**config, "rates": rates, "arrivals": args.arrivals,
                           "requests": len(items)},
                   slo={}, summary=records(table),
                   notes=[note(fresh)], kind="replay")
    publish(found, args.out, plots=not args.no_plots)
    return 0
