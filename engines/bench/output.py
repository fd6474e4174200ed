"""What a comparison leaves behind: its report (engines.bench.run_report) and what renders
from it, CSV tables and PNGs in one folder and the closing text a person reads (the winner
table, the SLO, every bracket and ratio); beside them the raw records, traces and timelines of
its runs."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from engines.bench import clocks, disturbance, summary
from engines.bench.comparison import Comparison
from engines.bench.host import lines as lines_of_host
from engines.bench.metrics import write_csv
from engines.bench.run_report import FRAMES, Report, records, render
from engines.bench.slo import PairedSLO
from engines.bench.table import TIE

RAW_FRAMES = ("requests", "tokens")  # per request and per token: saved from the runs


def report(comparison: Comparison, frames: dict[str, pd.DataFrame] | None = None, *,
           notes: list[str] | None = None) -> Report:
    """The comparison's one report; `frames`: summary.frames(comparison) if computed
    already; `notes`: more closing lines (the CLI's: the kit, the scheduling)."""
    frames = frames if frames is not None else summary.frames(comparison)
    table = summary.summary(comparison)
    notes = closing_notes(comparison, table) + (notes or [])
    slo = comparison.slo
    return Report(
        config=asdict(comparison.config),
        slo={"ttft_s": slo.ttft_s, "itl_s": slo.itl_s, "attainment": slo.attainment,
             "basis": slo.basis},
        summary=records(table), notes=notes,
        frames={name: records(frames[name]) for name in FRAMES},
        samples={name: summary.samples(r) for name, r in comparison.results.items()},
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
    from engines.bench import timelines

    timelines.itl_timeline([r.disturbance for r in results if r.disturbance is not None],
                           out / "itl_timeline.png")
    slotted = [r.timeline for r in results if r.timeline is not None]
    if slotted:
        timelines.slot_timeline(slotted, out / "slot_timeline.png")


def write(comparison: Comparison, out: Path, *, plots: bool,
          notes: list[str] | None = None) -> Report:
    """The report and its renderings, and the runs' raw data, into `out`."""
    frames = summary.frames(comparison)
    found = report(comparison, frames, notes=notes)
    render(found, out, plots=plots)
    write_runs(comparison, frames, out, plots=plots)
    return found


def _ratio_lines(table: pd.DataFrame, column: str, label: str) -> list[str]:
    """Every engine's figure over the first engine's (the comparison's baseline: static in
    the default run, the first --engine otherwise)."""
    values = table.set_index("engine")[column]
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
    lines += _ratio_lines(table, "goodput_rps", "goodput")
    lines += _ratio_lines(table, "capacity_rps", "capacity")
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
