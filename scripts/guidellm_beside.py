"""The bench and GuideLLM against the same vLLM server, at the same rates, on the same requests
(docs/benchmarks.md, "Over HTTP, beside GuideLLM").

  python scripts/guidellm_beside.py [--rates 1,2,4] [--arrivals constant] [--requests 60]
      [--prompt-tokens 64] [--output-tokens 32] [--url URL --checkpoint DIR] [--out DIR]

Starts vLLM's OpenAI server once (engines.adapters.http's launcher, as :vllm_server: the tiny
preset, 8 sequences; BATCHING_VLLM_PYTHON names the vLLM venv's python) with `--tokenizer`
pointing at a directory holding only the WordLevel tokenizer (below), or uses the one at --url
(--tokenizer: that directory, which the server must have been given). Then, per rate: our replay
(engines.bench.rates, after one warm-up) and GuideLLM (`guidellm run`, from
$GUIDELLM or .venv-guidellm, built by ci/guidellm-env.sh) on the same requests, written as
GuideLLM's JSON-lines data: prompts are the words `t<id>`, which the server checkpoint's
WordLevel tokenizer maps to exactly our token ids. Prints one table with both tools' figures
side by side and writes it, with GuideLLM's JSON reports, to --out. Pin it (server and both
clients inherit the affinity): `taskset -c 0 python scripts/guidellm_beside.py`.

Why a tokenizer directory of its own: text prompts need the server to tokenize `t14 t898` as
[14, 898]. Beside the checkpoint's config.json (model_type qwen2), transformers 5 loads the
checkpoint's tokenizer.json as a Qwen2Tokenizer, which tokenizes those words to nothing (vLLM:
"The decoder prompt cannot be empty"); without a config.json beside it, it loads the file
as written. The bench itself sends token ids and never needs it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd

from engines.adapters.http import HTTPEngine
from engines.bench import rates, traces
from engines.bench.metrics import requests_frame, write_csv
from engines.bench.table import fmt

GUIDELLM = "GUIDELLM"
MODEL = "tiny"
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of process `root` and every live descendant, from /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICK
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


class CPUSampler:
    """Samples a process tree's CPU seconds every `every` s (a tree whose members come and go:
    GuideLLM's workers); `between(t0, t1)` is the CPU it used in that wall-clock window."""

    def __init__(self, every: float = 0.25) -> None:
        self.every, self.samples = every, list[tuple[float, float]]()
        self.root: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.root is not None:
                self.samples.append((time.time(), tree_cpu_s(self.root)))

    def between(self, t0: float, t1: float) -> float:
        inside = [cpu for t, cpu in self.samples if t0 <= t <= t1]
        return inside[-1] - inside[0] if len(inside) > 1 else float("nan")

    def stop(self) -> None:
        self._stop.set()


def guidellm_exe() -> str:
    path = Path(os.environ.get(GUIDELLM) or ".venv-guidellm/bin/guidellm")
    if not path.is_file():
        raise SystemExit(f"{GUIDELLM}: no guidellm at {path}: run `bash ci/guidellm-env.sh` "
                         f"or set {GUIDELLM}")
    return str(path)


def server(args: argparse.Namespace) -> tuple[str, Path, HTTPEngine, int | None]:
    """The server's URL, the tokenizer directory it was given, our adapter over it, and its
    pid (for its CPU use; None where --url is given without --server-pid)."""
    from engines.adapters.http.convert import server_checkpoint, write_tokenizer
    from engines.adapters.http.servers import vllm_server_process

    ckpt = server_checkpoint()
    vocab = int(json.loads((ckpt / "config.json").read_text())["vocab_size"])
    if args.url:
        if not args.tokenizer:
            raise SystemExit("--url needs --tokenizer (the directory the server was given)")
        return (args.url, Path(args.tokenizer),
                HTTPEngine(args.url, vocab_size=vocab, max_concurrency=8), args.server_pid)
    tokenizer = (args.out / "tokenizer").resolve()
    tokenizer.mkdir(parents=True, exist_ok=True)
    write_tokenizer(tokenizer, vocab)
    launched = vllm_server_process(extra=("--tokenizer", str(tokenizer)))
    return (launched.url, tokenizer,
            HTTPEngine(launched.url, vocab_size=vocab, max_concurrency=8, log=str(launched.log)),
            launched.process.pid)


def run_guidellm(url: str, tokenizer: Path, data: Path, rate: float, n: int, arrivals: str,
                 out: Path, workers: int | None = None) -> dict[str, Any]:
    """One `guidellm run` at `rate`; `workers` caps its worker processes (default: its own,
    10, each polling its queue every 0.1 ms)."""
    report = out / f"guidellm-{arrivals}-{rate:g}-w{workers or 'default'}.json"
    argv = [guidellm_exe(), "run",
            "--backend", f"kind=openai_http,target={url},model={MODEL},"
                         "request_format=/v1/completions",
            "--profile", f"kind={arrivals},rate={rate:g}",
            "--constraint", f"kind=max_requests,count={n}",
            "--data", f"kind=json_file,path={data}",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
            "--output", f"kind=json,path={report}",
            "--disable-console-interactive"]
    started = time.perf_counter()
    env = dict(os.environ)
    if workers:
        env["GUIDELLM__MAX_WORKER_PROCESSES"] = str(workers)
    sampler = CPUSampler()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        sampler.root = proc.pid
        stdout, stderr = proc.communicate()
    sampler.stop()
    done = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"guidellm exited {done.returncode}: {' '.join(argv)}")
    print(f"guidellm at {rate:g} req/s: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    row = summarize_guidellm(json.loads(report.read_text()))
    bench = json.loads(report.read_text())["benchmarks"][0]
    window = (bench["start_time"], bench["end_time"])
    row["client_cpu_s"] = sampler.between(*window)
    row["window"] = window
    return row


def _stat(metrics: dict[str, Any], name: str, key: str) -> float:
    return float(metrics[name]["successful"][key])


def summarize_guidellm(report: dict[str, Any]) -> dict[str, Any]:
    """One row from a GuideLLM JSON report's (single) benchmark: its own figures, and its
    sending delay (request start after the scheduled start) from its per-request records."""
    bench = report["benchmarks"][0]
    m = bench["metrics"]
    timings = [r["info"]["timings"] for r in bench["requests"]["successful"]]
    late = pd.Series([t["request_start"] - t["targeted_start"] for t in timings])
    per = m["time_to_first_token_ms"]["successful"]["percentiles"]
    itl = m["inter_token_latency_ms"]["successful"]["percentiles"]
    totals = m["request_totals"]
    return {
        "completed": int(totals["successful"]),
        "achieved_rps": _stat(m, "requests_per_second", "mean"),
        "output_tokens_per_s": _stat(m, "output_tokens_per_second", "mean"),
        "ttft_p50_ms": float(per["p50"]),
        "ttft_p95_ms": float(per["p95"]),
        "itl_p50_ms": float(itl["p50"]),  # per request: (last - first) / (n - 1)
        "send_late_p95_ms": 1000 * float(late.quantile(0.95)),
        "output_tokens_mean": _stat(m, "output_token_count", "mean"),
    }


def summarize_ours(row: dict[str, Any], run: Any) -> dict[str, Any]:
    req = requests_frame(run)
    return {
        "completed": int(row["completed"]),
        "achieved_rps": row["achieved_rps"],
        "output_tokens_per_s": row["output_tokens_per_s"],
        "ttft_p50_ms": 1000 * row["ttft_p50_s"],
        "ttft_p95_ms": 1000 * row["ttft_p95_s"],
        "itl_p50_ms": 1000 * float(req["itl_mean_s"].median()),  # GuideLLM's definition
        "itl_gap_p50_ms": 1000 * row["itl_p50_s"],  # ours: every gap
        "send_late_p95_ms": 1000 * row["queue_wait_p95_s"],
        "output_tokens_mean": float(req["n_tokens"].mean()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1,2,4")
    p.add_argument("--arrivals", choices=traces.AT_RATE, default="constant")
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--url")
    p.add_argument("--tokenizer")
    p.add_argument("--server-pid", type=int, help="with --url: the server's pid (its CPU use)")
    p.add_argument("--also-one-worker", type=float, metavar="RATE",
                   help="also run GuideLLM at RATE with one worker process")
    p.add_argument("--out", type=Path, default=Path("guidellm-beside"))
    args = p.parse_args()
    guidellm_exe()
    wanted = rates.parse_rates(args.rates)
    args.out.mkdir(parents=True, exist_ok=True)
    url, tokenizer, engine, pid = server(args)
    items = rates.workload(args.requests, max_model_len=engine.max_model_len,
                           vocab_size=engine.vocab_size, seed=args.seed,
                           prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens)
    data = rates.export_guidellm(items, args.out / "data.jsonl")
    rows = []
    server_cpu = CPUSampler()
    server_cpu.root = pid
    for i, rate in enumerate(wanted):
        started = time.perf_counter()
        if i == 0:  # one warm-up, unmeasured
            rates.replay({"bench": engine}, items[:8], [rate], process=args.arrivals)
        cpu0, t0 = time.process_time(), time.time()
        table, runs = rates.replay({"bench": engine}, items, [rate], process=args.arrivals,
                                   seed=args.seed, warmup=0)
        cpu1, t1 = time.process_time(), time.time()
        print(f"bench at {rate:g} req/s: {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
        ours = summarize_ours(table.iloc[0].to_dict(), runs[0])
        ours.update(client_cpu_s=cpu1 - cpu0, window=(t0, t1))
        theirs = run_guidellm(url, tokenizer, data, rate, args.requests, args.arrivals, args.out)
        rows.append({"tool": "batching-bench", "rate": rate, **ours})
        rows.append({"tool": "guidellm", "rate": rate, **theirs})
        write_csv(requests_frame(runs[0]), args.out / f"requests-{rate:g}.csv")
    if args.also_one_worker:
        theirs = run_guidellm(url, tokenizer, data, args.also_one_worker, args.requests,
                              args.arrivals, args.out, workers=1)
        rows.append({"tool": "guidellm, 1 worker", "rate": args.also_one_worker, **theirs})
    for row in rows:
        t0, t1 = row.pop("window")
        row["server_cpu_s"] = server_cpu.between(t0, t1)
        row["run_s"] = t1 - t0
    frame = pd.DataFrame(rows)
    write_csv(frame, args.out / "beside.csv")
    print(frame.to_string(index=False, formatters=dict.fromkeys(frame.columns, fmt)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
