"""A recorded run as pandas DataFrames (one row per request, per token, per step) and summaries.

Conventions: times are seconds after the run's start. A token's time is the end of the step
that produced it. Waiting is measured from arrival: queue wait runs to the start of the step
that produced the request's first token (the step that admitted and prefilled it), TTFT to the
end of that step. ITL is the gap between consecutive tokens of one request.

A streaming engine's tokens (a server's, engines.bench.streaming) are timed by their arrival
at the client instead (Run.token_times), and the server's queue is not visible: its queue wait
is the client's sending delay (arrival to add_request), and the server's own queueing is
inside TTFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from engines.bench.record import RunSummary, SLOFigures
from engines.bench.replay import Run
from engines.bench.slo import SLO


def _token_times(run: Run, rid: str, steps: list[int], ends: np.ndarray) -> np.ndarray:
    """When each of the request's tokens came: its arrival where the engine streams, else the
    end of the step that returned it."""
    streamed = run.token_times.get(rid)
    if streamed is not None:
        return np.asarray(streamed, dtype=float)
    return ends[steps] if steps else np.empty(0)


def requests_frame(run: Run) -> pd.DataFrame:
    starts = np.array([s.start_s for s in run.steps])
    ends = np.array([s.end_s for s in run.steps])
    rows = []
    for arrival in run.trace.arrivals:
        rid = arrival.request_id + run.id_suffix
        steps = run.token_steps.get(rid, [])
        times = _token_times(run, rid, steps, ends)
        gaps = np.diff(times)
        first = steps[0] if steps else None
        admitted = (run.added_s.get(rid, np.nan) if rid in run.token_times
                    else starts[first] if first is not None else np.nan)
        rows.append({
            "engine": run.engine,
            "request_id": arrival.request_id,
            "prompt_len": arrival.item.prompt_len,
            "max_tokens": arrival.item.max_tokens,
            "n_tokens": len(steps),
            "finish_reason": run.finish_reason.get(rid),
            "arrival_s": arrival.at_s,
            "added_s": run.added_s.get(rid, np.nan),
            "admitted_s": admitted,
            "first_token_s": times[0] if len(times) else np.nan,
            "finish_s": times[-1] if len(times) else np.nan,
            "itl_mean_s": gaps.mean() if len(gaps) else np.nan,
            "itl_max_s": gaps.max() if len(gaps) else np.nan,
        })
    df = pd.DataFrame(rows)
    df["queue_wait_s"] = df["admitted_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    return df


def tokens_frame(run: Run) -> pd.DataFrame:
    """One row per token, requests in trace order. Built from flat arrays, not one frame per
    request: a capacity probe has hundreds of requests and a search dozens of probes."""
    ends = np.array([s.end_s for s in run.steps])
    ids: list[str] = []
    index: list[np.ndarray] = []
    steps: list[np.ndarray] = []
    itl: list[np.ndarray] = []
    times: list[np.ndarray] = []
    for arrival in run.trace.arrivals:
        rid = arrival.request_id + run.id_suffix
        mine = np.asarray(run.token_steps.get(rid, []), dtype=int)
        if not len(mine):
            continue
        at = _token_times(run, rid, list(mine), ends)
        ids.extend([arrival.request_id] * len(mine))
        index.append(np.arange(len(mine)))
        steps.append(mine)
        times.append(at)
        itl.append(np.concatenate([[np.nan], np.diff(at)]))
    columns = ["engine", "request_id", "index", "step", "time_s", "itl_s"]
    if not ids:
        return pd.DataFrame(columns=columns)
    step = np.concatenate(steps)
    return pd.DataFrame({
        "engine": run.engine,
        "request_id": ids,
        "index": np.concatenate(index),
        "step": step,
        "time_s": np.concatenate(times),
        "itl_s": np.concatenate(itl),
    })[columns]


def steps_frame(run: Run) -> pd.DataFrame:
    prompt_len = {a.request_id + run.id_suffix: a.item.prompt_len for a in run.trace.arrivals}
    return pd.DataFrame({
        "engine": run.engine,
        "step": np.arange(len(run.steps)),
        "start_s": [s.start_s for s in run.steps],
        "end_s": [s.end_s for s in run.steps],
        "n_tokens": [s.n_tokens for s in run.steps],
        "n_admitted": [len(s.first_token_of) for s in run.steps],
        "admitted_max_prompt": [max((prompt_len[r] for r in s.first_token_of), default=0)
                                for s in run.steps],
        "occupied": [sum(x is not None for x in s.slots) if s.slots is not None else np.nan
                     for s in run.steps],
    }).assign(duration_s=lambda d: d.end_s - d.start_s)


def _q(series: pd.Series, q: float) -> float:
    values = series.dropna()
    return float(values.quantile(q)) if len(values) else float("nan")


def summarize(run: Run, requests: pd.DataFrame | None = None,
              tokens: pd.DataFrame | None = None, slo: SLO | None = None) -> RunSummary:
    """The run's figures (pass the frames if already built)."""
    requests = requests_frame(run) if requests is None else requests
    tokens = tokens_frame(run) if tokens is None else tokens
    done = requests[requests["finish_reason"].notna()]
    end = float(done["finish_s"].max()) if len(done) else float("nan")
    span = end - float(requests["arrival_s"].min()) if len(done) else float("nan")
    waits = requests["queue_wait_s"].dropna()
    figures = None
    if slo is not None:
        ok = slo_met(requests, slo)
        figures = SLOFigures(
            slo_attained=float(ok.mean()),  # share of the trace's requests
            slo_met_rps=float(ok.sum()) / span if span else float("nan"),
            ttft_p90_s=_q(requests["ttft_s"], 0.9),
            itl_mean_p90_s=_q(requests["itl_mean_s"], 0.9))
    return RunSummary(
        engine=run.engine,
        offered_rps=run.trace.rate,
        n_requests=len(requests),
        completed=len(done),
        achieved_rps=len(done) / span if span and span > 0 else float("nan"),
        output_tokens=int(requests["n_tokens"].sum()),
        output_tokens_per_s=float(requests["n_tokens"].sum()) / span if span else float("nan"),
        ttft_p50_s=_q(requests["ttft_s"], 0.5),
        ttft_p95_s=_q(requests["ttft_s"], 0.95),
        queue_wait_p50_s=_q(requests["queue_wait_s"], 0.5),
        queue_wait_p95_s=_q(requests["queue_wait_s"], 0.95),
        e2e_p50_s=_q(requests["e2e_s"], 0.5),
        e2e_p95_s=_q(requests["e2e_s"], 0.95),
        queue_wait_mean_s=float(waits.mean()) if len(waits) else float("nan"),
        itl_p50_s=_q(tokens["itl_s"], 0.5),
        itl_p95_s=_q(tokens["itl_s"], 0.95),
        itl_max_s=float(tokens["itl_s"].max()) if len(tokens) else float("nan"),
        slo=figures,
        wasted_slot_steps=run.wasted_slot_steps,
        steps=len(run.steps),
        step_time_s=run.step_s,
        driver_overhead_pct=100.0 * run.overhead,
        gave_up=run.gave_up)


def overhead_pct(runs: Sequence[Run]) -> float:
    """The driver's own time over the runs, as a percentage of their step time."""
    step_s = sum(r.step_s for r in runs)
    return 100.0 * sum(r.driver_s for r in runs) / step_s if step_s else 0.0


def slo_met(requests: pd.DataFrame, slo: SLO) -> pd.Series:
    """Per request: finished, TTFT within target, mean ITL within target. A request that never
    finished (or never started) misses; a one-token request has no gaps, so no ITL to miss."""
    itl = requests["itl_mean_s"].fillna(0.0)
    return (requests["finish_reason"].notna() & (requests["ttft_s"] <= slo.ttft_s)
            & (itl <= slo.itl_s))


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, float_format="%.6g")
    return path
