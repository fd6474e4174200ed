"""What a comparison leaves behind: its report (engines.bench.run_report), built here from the
measured runs, and beside it the raw records, traces and timelines of its runs.

The report holds one summary row per engine (the first replica's: the CLI runs one), the
small CSV frames, asv's samples (every replica's) and the closing text a person reads (the
winner table's ties, the SLO, every bracket and ratio). Its rows are records
(engines.bench.record: Summary, ProbeRow, ClosedRunRow, Samples), whose field names are the
columns; those are a contract (scripts read summary.csv): new ones are appended, none renamed
(capacity_low_rps, a copy of capacity_rps, was dropped: CHANGELOG.md).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from engines.bench import clocks, disturbance
from engines.bench.comparison import Comparison, EngineResult
from engines.bench.host import lines as lines_of_host
from engines.bench.metrics import overhead_pct, requests_frame, tokens_frame, write_csv
from engines.bench.record import (
    COLUMN,
    LATENCY_COLUMNS,
    SUMMARY_COLUMNS,
    ClosedRunRow,
    ProbeRow,
    Samples,
    Summary,
    TargetsUsed,
    row,
    rows,
)
from engines.bench.run_report import FRAMES, Report, records, render
from engines.bench.slo import PairedSLO
from engines.bench.table import TIE


def summary_row(result: EngineResult, comparison: Comparison) -> Summary:
    slo = comparison.slo
    ref = result.reference_summaries[0] if result.reference_summaries else None
    spike = disturbance.headline(result.spikes)
    baseline = result.spikes["baseline_gap_s"].iloc[0] if len(result.spikes) else np.nan
    described = comparison.engines.get(result.name)
    return Summary(
        engine=result.name,
        capacity_rps=result.capacity.low,
        capacity_high_rps=result.capacity.high,
        output_tokens_per_s=result.tokens_per_s,
        **{name: getattr(ref, name) if ref is not None else np.nan for name in LATENCY_COLUMNS},
        goodput_rps=result.goodput.low,
        itl_spike_ratio=spike["ratio"],
        spike_prompt_len=spike["prompt_len"],
        baseline_itl_s=baseline,
        wasted_slot_steps=result.closed[-1].wasted_slot_steps,
        driver_overhead_pct=overhead_pct(list(result.runs())),
        reference_rps=result.reference.trace.rate if result.reference else np.nan,
        goodput_high_rps=result.goodput.high,
        targets=TargetsUsed(slo_ttft_s=slo.ttft_s, slo_itl_s=slo.itl_s),
        slo_attainment=slo.attainment,
        itl_spike_ci_low=spike["ci_low"],
        itl_spike_ci_high=spike["ci_high"],
        itl_spike_samples=int(spike["steps"]),
        search_tie=comparison.config.search_tie,
        reference_basis_rps=(result.reference_basis_rps[0] if result.reference_basis_rps
                             else np.nan),
        reference_drift=(comparison.reference_drift[0] if comparison.reference_drift
                         else np.nan),
        steady_baseline_s=(comparison.steady_baseline_s
                           if comparison.steady_baseline_s is not None else np.nan),
        host_speed_min=comparison.host_speed[0] if comparison.host_speed else np.nan,
        host_speed_max=comparison.host_speed[1] if comparison.host_speed else np.nan,
        spike_host_prefill_x=(comparison.disturbance_times.prefill_over_decode()
                              if comparison.disturbance_times is not None else np.nan),
        compute_threads=(described.threads if described and described.threads is not None
                         else np.nan),
        execution=described.execution if described else "",
    )


def summary(comparison: Comparison) -> pd.DataFrame:
    found = rows(summary_row(r, comparison) for r in comparison.results.values())
    return pd.DataFrame(found)[list(SUMMARY_COLUMNS)]


def tables(comparison: Comparison) -> dict[str, pd.DataFrame]:
    """The CSV tables: per request and per token (reference and disturbance runs), every
    probe of both searches, spikes by admitted length, closed runs."""
    requests: list[pd.DataFrame] = []
    tokens: list[pd.DataFrame] = []
    probes: list[ProbeRow] = []
    closed: list[ClosedRunRow] = []
    for result in comparison.results.values():
        for label, run in (("reference", result.reference),
                           ("disturbance", result.disturbance)):
            if run is None:
                continue
            requests.append(requests_frame(run).assign(run=label))
            tokens.append(tokens_frame(run).assign(run=label))
        for replica, (cap, good) in enumerate(zip(result.capacities, result.goodputs,
                                                  strict=True)):
            for search, found in (("capacity", cap), ("goodput", good)):
                probes.extend(ProbeRow(probe=p.summary, search=search, replica=replica,
                                       bracket=found.bracket()) for p in found.probes)
        closed.extend(ClosedRunRow(figures=figures, run=i)
                      for i, figures in enumerate(result.closed_summaries))
    return {
        "requests": pd.concat(requests, ignore_index=True),
        "tokens": pd.concat(tokens, ignore_index=True),
        "probes": pd.DataFrame(rows(probes)),
        "spikes": pd.concat([r.spikes for r in comparison.results.values()],
                            ignore_index=True),
        "closed": pd.DataFrame(rows(closed)),
    }


def samples(result: EngineResult) -> Samples:
    """Repeated measurements of each tracked figure, for asv's statistics: closed runs,
    replicas of the searches and the reference run, admission steps."""
    def inverse(values: list[float]) -> list[float]:
        return [1.0 / v for v in values if v > 0 and np.isfinite(v)]

    references = [r for r in result.references if r is not None]
    return Samples(
        seconds_per_output_token=inverse(
            [s.output_tokens_per_s for s in result.closed_summaries]),
        seconds_per_request_at_capacity=inverse([c.low for c in result.capacities]),
        seconds_per_request_at_goodput=inverse([g.low for g in result.goodputs]),
        ttft_p95_s=[float(s.ttft_p95_s) for s in result.reference_summaries],
        itl_spike_ratio=(disturbance.headline_samples(result.disturbance)
                         if result.disturbance is not None else []),
        driver_overhead_pct=[overhead_pct([r]) for r in (*result.closed, *references)],
    )


RAW_FRAMES = ("requests", "tokens")  # per request and per token: saved from the runs


def report(comparison: Comparison, frames: dict[str, pd.DataFrame] | None = None, *,
           notes: list[str] | None = None) -> Report:
    """The comparison's one report; `frames`: tables(comparison) if computed
    already; `notes`: more closing lines (the CLI's: the kit, the scheduling)."""
    frames = frames if frames is not None else tables(comparison)
    table = summary(comparison)
    notes = closing_notes(comparison, table) + (notes or [])
    slo = comparison.slo
    return Report(
        config=asdict(comparison.config),
        slo={"ttft_s": slo.ttft_s, "itl_s": slo.itl_s, "attainment": slo.attainment,
             "basis": slo.basis},
        summary=records(table), notes=notes,
        frames={name: records(frames[name]) for name in FRAMES},
        samples={name: row(samples(r)) for name, r in comparison.results.items()},
        goodput={r.name: r.goodput.low for r in comparison.results.values()})


def write_runs(comparison: Comparison, frames: dict[str, pd.DataFrame], out: Path, *,
               plots: bool) -> None:
    """The raw data beside the report: per-request and per-token CSVs, replayable traces,
    the ITL and slot timelines."""
    out.mkdir(parents=True, exist_ok=True)
    for name in RAW_FRAMES:
        write_csv(frames[name], out / f"{name}.csv")
    results = list(comparison.results.values())
    for result in results:
        if result.reference is not None:
            result.reference.trace.save(out / f"trace-reference-{result.name}.json")
    if results and results[0].disturbance is not None:
        results[0].disturbance.trace.save(out / "trace-disturbance.json")
    if not plots:
        return
    from engines.bench import plots as figures  # matplotlib: only when plotting

    figures.itl_timeline([r.disturbance for r in results if r.disturbance is not None],
                           out / "itl_timeline.png")
    slotted = [r.timeline for r in results if r.timeline is not None]
    if slotted:
        figures.slot_timeline(slotted, out / "slot_timeline.png")


def write(comparison: Comparison, out: Path, *, plots: bool,
          notes: list[str] | None = None) -> Report:
    """The report and its renderings, and the runs' raw data, into `out`."""
    frames = tables(comparison)
    found = report(comparison, frames, notes=notes)
    render(found, out, plots=plots)
    write_runs(comparison, frames, out, plots=plots)
    return found


def _ratio_lines(table: pd.DataFrame, column: str, label: str) -> list[str]:
    """Every engine's figure over the first engine's (the comparison's baseline: static in
    the default run, the first --engine otherwise)."""
    values = table.set_index(COLUMN.engine)[column]
    base, others = str(values.index[0]), values.iloc[1:]
    if not values.iloc[0] > 0:
        return []
    return [f"{label} ratio {name}/{base}: {value / values.iloc[0]:.2f}x"
            for name, value in others.items()]


def slo_origin(comparison: Comparison) -> list[str]:
    """Where the targets came from: given, or which model's forward was timed, when, how
    many times, how far the rounds' targets spread, and that no engine under test was timed."""
    targets, times = comparison.targets, comparison.hardware
    if times is None:
        return ["  targets given (--slo-ttft, --slo-itl): the same in every round"]
    decodes, prefills = times.samples
    measured = (f"  measured on preset {comparison.config.preset}, not on the engines under "
                f"test ({', '.join(comparison.results)}): for targets of their own, set "
                "--slo-ttft and --slo-itl")
    if not isinstance(targets, PairedSLO):
        return [f"  targets from {times.basis} ({decodes} decode steps of {times.batch} rows, "
                f"mean {times.step_s * 1e3:.3g} ms; {prefills} prefills of {times.prompt_len} "
                f"tokens, {times.prefill_s * 1e3:.3g} ms); the noisy-host kit (--host on) "
                "times them between the steps in every round", measured]
    (ttft_lo, ttft_hi), (itl_lo, itl_hi) = targets.spread()
    return [
        f"  targets from {times.basis}, timed between the engines' steps in every probe round"
        f" ({decodes} decode steps of {times.batch} rows, median round's mean "
        f"{times.step_s * 1e3:.3g} ms; {prefills} prefills of {times.prompt_len} tokens, "
        f"{times.prefill_s * 1e3:.3g} ms)",
        f"  each probe judged by its own round's targets: TTFT {ttft_lo * 1e3:.3g}-"
        f"{ttft_hi * 1e3:.3g} ms, mean ITL {itl_lo * 1e3:.3g}-{itl_hi * 1e3:.3g} ms over "
        f"{len(targets.rounds)} rounds",
        measured,
    ]


def _ties(search_tie: float) -> str:
    text = f"ties: engines within {TIE:g}x of a row's best share its win"
    if search_tie == TIE:
        return text
    return (text + f"; capacity and goodput within {search_tie:g}x (--search-tie; --quick's "
            "default is how far its searches moved between runs: docs/benchmarks.md, winners "
            "and ties)")


def closing_notes(comparison: Comparison, table: pd.DataFrame) -> list[str]:
    """The closing lines under the winner table."""
    config = comparison.config
    lines = [_ties(config.search_tie), f"SLO: {comparison.slo.describe()}",
             *slo_origin(comparison)]
    for result in comparison.results.values():
        for label, found in (("goodput", result.goodput), ("capacity", result.capacity)):
            lines.append(f"{label} {result.name}: {found.low:.4g} req/s, bracket "
                         f"{found.bracket()}, {len(found.probes)} probes")
        spike = disturbance.headline(result.spikes)
        if spike["steps"]:
            lines.append(f"ITL spike {result.name}: {spike['ratio']:.3g}x "
                         f"[95% CI {spike['ci_low']:.3g}, {spike['ci_high']:.3g}] over "
                         f"{spike['steps']} admissions of {int(spike['prompt_len'])}-token "
                         "prompts" + (" (fewer than 5: read with care)"
                                      if spike["steps"] < disturbance.MIN_SAMPLES else ""))
    lines += lines_of_host.spike_host(comparison.disturbance_times,
                                      any(len(r.spikes) for r in comparison.results.values()))
    lines += _ratio_lines(table, COLUMN.goodput_rps, "goodput")
    lines += _ratio_lines(table, COLUMN.capacity_rps, "capacity")
    first = next(iter(comparison.results.values()))
    lines += [f"capacity rule: {first.capacity.rule}", f"goodput rule: {first.goodput.rule}"]
    lines.append(f"times: {clocks.describe(config.clock)} (--clock {config.clock})"
                 + lines_of_host.steady_text(comparison.steady_baseline_s,
                                             comparison.host_speed))
    when = ("re-timed just before the reference run" if config.host_kit
            else "the closed stage's")
    lines.append("latency columns: " + (f"every engine at {config.reference_rps:g} req/s"
                 if config.reference_rps else
                 f"each engine at {config.reference_load:g} x its own closed-batch request "
                 f"rate, {when}"))
    lines.append(lines_of_host.drift_line(comparison.reference_drift))
    return lines
