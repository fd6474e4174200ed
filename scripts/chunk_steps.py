"""The admission disturbance seen chunk by chunk, for engines that prefill in chunks.

The bench's ITL spike (engines.bench.disturbance) groups steps by the first tokens they
produced: for a chunked engine that is the step carrying a prompt's LAST chunk, and the steps
carrying its earlier chunks count as quiet, baseline steps. So the bench's ratio depends on
how big the last chunk happens to be (482 tokens at a budget of 104 leave a last chunk of ~94;
at 112, of ~62), and the dearer middle chunks raise the baseline instead. This replays the
bench's disturbance draw, paired, and reports per engine beside the bench's ratio what every
step carrying a chunk of the longest class costs its incumbents: the median and p90 of those
steps' incumbent gaps over the median gap of pure decode steps (no chunk, no first token).
It looks inside the paged engine (its schedule) on purpose; engines.bench stays protocol-only.

    python scripts/chunk_steps.py [--runs 3] [--engine LABEL=MODULE:CALLABLE ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch

from engines.bench import disturbance, draws, traces
from engines.bench.paired import run_paired
from engines.factories import load_labeled
from engines.paged.engine import PagedEngine
from engines.paged.state import PagedRequest
from engines.protocol import Engine

DEFAULT = ["continuous=engines.slot.continuous:ContinuousBatchEngine",
           "paged=engines.paged:PagedEngine"]


def _log_chunks(engine: PagedEngine) -> list[list[int]]:
    """Per step: the prompt lengths of the requests that computed a chunk (not one decode
    token) in it. Wraps the engine's own _schedule."""
    log: list[list[int]] = []
    schedule = engine._schedule

    def logged() -> dict[PagedRequest, int]:
        plan = schedule()
        log.append([len(seq.request.prompt_token_ids) for seq, n in plan.items()
                    if n > 1 or not seq.output])
        return plan

    engine._schedule = logged  # type: ignore[method-assign]
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engine", action="append", default=[])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    factories: dict[str, Callable[[], Engine]] = dict(
        load_labeled(spec) for spec in args.engine or DEFAULT)
    engines = {name: make() for name, make in factories.items()}
    logs = {name: _log_chunks(e) for name, e in engines.items() if isinstance(e, PagedEngine)}
    # The bench's own draw: 8 short requests that fill the slots, then 8 of every class.
    items = draws.admissions(8, max_model_len=512, vocab_size=1024, slots=8, seed=2)
    longest = max(item.prompt_len for item in items)
    rows: dict[str, list[str]] = {name: [] for name in engines}
    for run_index in range(args.runs):
        for log in logs.values():
            log.clear()
        trace = traces.closed(items, tag=f"chunks{run_index}")
        runs = run_paired(engines, dict.fromkeys(engines, trace))
        for name, run in runs.items():
            ratio = disturbance.headline(disturbance.spikes(run)[1])["ratio"]
            cell = f"{ratio:5.2f}"
            if name in logs:
                gaps = disturbance.step_gaps(run)
                chunks = [logs[name][step] for step in gaps["step"]]
                has_chunk = np.array([bool(c) for c in chunks])
                pure = gaps["gap_s"][~has_chunk & (gaps["n_admitted"] == 0)].median()
                long_steps = gaps["gap_s"][np.array([longest in c for c in chunks])]
                cell += (f" (every {longest}-token chunk: p50 {long_steps.median() / pure:.2f},"
                         f" p90 {long_steps.quantile(0.9) / pure:.2f})")
            rows[name].append(cell)
    print(f"ITL spike when a {longest}-token prompt is admitted, per run: the bench's ratio"
          " (its last chunk over all other steps), and for chunked engines every step that"
          " carried one of its chunks over pure decode steps")
    for name, cells in rows.items():
        print(f"{name:12} " + "   ".join(cells))


if __name__ == "__main__":
    main()
