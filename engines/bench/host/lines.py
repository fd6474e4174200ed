"""What the kit says about the host under the results: the steady clock's range, the drift
over the reference run, the prefill-over-decode mix over the admission-spike steps."""

from __future__ import annotations

import numpy as np

from engines.bench.slo import HardwareTimes

DRIFT_WARNING = 1.15  # the host's speed moved by more than this (either way): said


def steady_text(baseline_s: float | None, speed: tuple[float, float] | None) -> str:
    """What the steady clock rescaled by (engines.bench.host.steady); "" on other clocks."""
    if speed is None or baseline_s is None:
        return ""
    low, high = speed
    return (f"; the kit's gauge, a decode step between the engines' steps, took "
            f"{baseline_s * 1e3:.3g} ms over its first turns and {low:.2f}-{high:.2f}x that "
            "over the run: every figure is at the speed of those turns (docs/benchmarks.md, "
            "the noisy-host kit)")


def spike_host(times: HardwareTimes | None, spikes: bool) -> list[str]:
    """The host's own prefill over decode step while the spikes were measured: what a spike
    ratio moves with between runs on a host whose two speeds move apart."""
    if times is None or not spikes:
        return []
    decodes, prefills = times.samples
    # Not indented: it is about every engine's spike, not the last one's line above it.
    return [f"ITL spikes' host: over the same steps, the kit's gauge's {times.prompt_len}-"
            f"token prefill took {times.prefill_over_decode():.3g}x its {times.batch}-row "
            f"decode step ({times.basis}; {decodes} decode steps, {prefills} prefills): the "
            "host's own ratio, which a spike moves with; compare spikes between runs at the "
            "same one"]


def drift_line(drifts: list[float]) -> str:
    """The closing text's line on the host's speed over the reference run(s)."""
    timed = [d for d in drifts if np.isfinite(d)]
    if not timed:
        return ("reference run: the host's speed over it was not timed (the noisy-host kit "
                "off, or --rate: no re-timing)")
    worst = max(timed, key=lambda d: abs(np.log(d)))
    text = (f"reference run: the kit's gauge's decode step took {worst:.2f}x as long as "
            "while its rates were re-timed")
    if max(worst, 1 / worst) > DRIFT_WARNING:
        text += (f" (past {DRIFT_WARNING:g}x: the host's speed moved under it, so its load "
                 "was not the stated share of capacity and the latency rows may not repeat)")
    return text
