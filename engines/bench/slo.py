"""Latency targets (SLOs) for goodput, derived per preset from what the hardware does.

Goodput is the request rate at which a stated share of requests (90% by default) meets both a
time-to-first-token target and a mean inter-token-latency target (DistServe, Sarathi-Serve and
`vllm bench serve --goodput` report it so). A fixed target in seconds would mean different
things on a 2-core CPU and a GPU, so the targets are multiples of two timings of the preset's
own transformers forward (engines.bench.calibration), taken on the same hardware:

- ITL target: `itl_steps` x the decode step of a full uniform batch (every slot busy, short
  contexts): how fast tokens come out when nothing else competes. Sarathi-Serve states its
  inter-token (TBT) targets the same way, as a multiple of a decode iteration's time.
- TTFT target: `ttft_prefills` x the prefill of one longest-class prompt served alone: the
  floor a request of the workload's heaviest class cannot beat, so an idle engine meets the
  target with room to spare. DistServe scales its TTFT targets from single-request latency.

By default the two timings are taken once, before the run (engines.bench.calibration), on the
engines' clock. With the noisy-host kit (PairedSLO) they are taken between the engines' steps
in every probe round (engines.bench.host.gauge), and each round's probes are judged by the
targets of that round: a machine that slows down mid-run (another tenant starts) then moves
the targets and the engines alike, where targets timed once would hold a slowed engine to the
quiet machine's speed.

The multiples are one rule for every preset (RULE), and `--slo-ttft` / `--slo-itl` override the
result (a given target is the same in every round). The share is `attainment`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

ATTAINMENT = 0.9


@dataclass(frozen=True, slots=True)
class SLO:
    ttft_s: float  # time to first token, from arrival
    itl_s: float  # mean gap between one request's consecutive tokens
    attainment: float = ATTAINMENT  # share of requests that must meet both targets
    basis: str = "given"  # how the targets were set, printed with the results

    def __post_init__(self) -> None:
        for name in ("ttft_s", "itl_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"slo.{name}: must be > 0 seconds, got {value}")
        if not 0 < self.attainment <= 1:
            raise ValueError(f"slo.attainment: must be in (0, 1], got {self.attainment}")

    def describe(self) -> str:
        return (f"TTFT <= {self.ttft_s * 1e3:.4g} ms and mean ITL <= {self.itl_s * 1e3:.4g} ms "
                f"for >= {self.attainment:.0%} of requests ({self.basis})")

    def override(self, *, ttft_s: float | None = None, itl_s: float | None = None,
                 attainment: float | None = None) -> SLO:
        """The same SLO with the given targets replaced (command-line overrides)."""
        if ttft_s is None and itl_s is None and attainment is None:
            return self
        given = [f"{n} given" for n, v in (("TTFT", ttft_s), ("ITL", itl_s)) if v is not None]
        return replace(self, ttft_s=ttft_s or self.ttft_s, itl_s=itl_s or self.itl_s,
                       attainment=attainment or self.attainment,
                       basis="; ".join([*given, self.basis]))


@dataclass(frozen=True, slots=True)
class SLORule:
    """How a preset's targets follow from the hardware timings (see the module docstring)."""

    ttft_prefills: float  # TTFT target = this x the longest prompt's prefill, alone
    itl_steps: float  # mean-ITL target = this x one decode step of a full uniform batch


# One rule for every preset and checkpoint (the targets scale with its own timings). The ITL
# multiple is Sarathi-Serve's strict one (5x a decode iteration); TTFT allows about two long
# prefills ahead of a request's own, plus its own.
RULE = SLORule(ttft_prefills=3.0, itl_steps=5.0)


@dataclass(frozen=True, slots=True)
class HardwareTimes:
    """Two timings of the preset's model on this machine, in this run."""

    step_s: float  # one decode step of a full uniform batch
    prefill_s: float  # prefill of one longest-class prompt, alone
    batch: int  # rows in the uniform batch
    prompt_len: int  # tokens in the longest-class prompt
    basis: str  # what was timed
    samples: tuple[int, int] = (0, 0)  # (decode steps, prefills) the figures are means of

    def prefill_over_decode(self) -> float:
        """How many decode steps one prefill costs: the host's mix of the two speeds, which
        moves on a VM (docs/benchmarks.md, how stable a quick run is)."""
        return self.prefill_s / self.step_s


def derive(times: HardwareTimes, preset: str, *, attainment: float = ATTAINMENT) -> SLO:
    return SLO(ttft_s=RULE.ttft_prefills * times.prefill_s, itl_s=RULE.itl_steps * times.step_s,
               attainment=attainment,
               basis=f"{preset}: TTFT {RULE.ttft_prefills:g} x {times.prompt_len}-token "
                     f"prefill, ITL {RULE.itl_steps:g} x {times.batch}-row decode step")


class Timer(Protocol):
    """Runs and times one call of the targets' model (engines.bench.calibration.ForwardTimer,
    or a test double)."""

    batch: int  # rows in the decode step's uniform batch
    prompt_len: int  # tokens in the prefilled prompt
    basis: str  # what is timed, e.g. "tiny float32 on cpu, transformers forward"

    def decode(self) -> float: ...  # seconds for one decode step of the uniform batch

    def prefill(self) -> float: ...  # seconds for one prefill of the long prompt, alone


ONCE = (12, 4)  # decode steps and prefills behind targets timed once, before the run


def time_once(timer: Timer) -> HardwareTimes:
    """The core's targets' timings (the kit off): means of ONCE calls, before the run."""
    decodes, prefills = ONCE
    return HardwareTimes(
        step_s=float(np.mean([timer.decode() for _ in range(decodes)])),
        prefill_s=float(np.mean([timer.prefill() for _ in range(prefills)])),
        batch=timer.batch, prompt_len=timer.prompt_len,
        basis=f"{timer.basis}, timed once before the run", samples=ONCE)


class TimingSource(Protocol):
    """Timings taken between engine steps (engines.bench.host.gauge.HostGauge, turned by the
    kit's hook)."""

    def take(self) -> HardwareTimes: ...  # the round's timings; the next round starts

    def restart(self) -> None: ...  # drop the round's timings so far


@dataclass(frozen=True, slots=True)
class Round:
    """One paired probe round's timings and the targets derived from them."""

    times: HardwareTimes
    slo: SLO


@dataclass(slots=True)
class PairedSLO:
    """Targets derived afresh in every paired round, from timings taken during that round.

    Its source (the kit's gauge) turns between the engines' steps (the RunContext's hook);
    `close_round` ends a round and returns the SLO its probes are judged by. Given targets
    (`ttft_s`, `itl_s`) replace the derived ones in every round."""

    source: TimingSource
    preset: str
    attainment: float = ATTAINMENT
    ttft_s: float | None = None
    itl_s: float | None = None
    rounds: list[Round] = field(default_factory=list)

    def close_round(self) -> SLO:
        times = self.source.take()
        slo = derive(times, self.preset, attainment=self.attainment).override(
            ttft_s=self.ttft_s, itl_s=self.itl_s)
        self.rounds.append(Round(times, slo))
        return slo

    def describe(self) -> str:
        """The rule, for the goodput search's text (the seconds differ round by round)."""
        ttft = (f"{self.ttft_s * 1e3:.4g} ms" if self.ttft_s is not None
                else f"{RULE.ttft_prefills:g} x the long prefill")
        itl = (f"{self.itl_s * 1e3:.4g} ms" if self.itl_s is not None
               else f"{RULE.itl_steps:g} x the decode step")
        return (f"TTFT <= {ttft} and mean ITL <= {itl} for >= {self.attainment:.0%} of "
                f"requests, {self.preset}'s timings taken between the engines' steps in the "
                "same round")

    def headline(self) -> Round:
        """The median round: each target and timing the median over rounds (one round is
        closed now if none ran)."""
        if not self.rounds:
            self.close_round()
        times = [r.times for r in self.rounds]
        first = times[0]
        median = HardwareTimes(
            step_s=float(np.median([t.step_s for t in times])),
            prefill_s=float(np.median([t.prefill_s for t in times])),
            batch=first.batch, prompt_len=first.prompt_len, basis=first.basis,
            samples=(sum(t.samples[0] for t in times), sum(t.samples[1] for t in times)))
        slo = derive(median, self.preset, attainment=self.attainment).override(
            ttft_s=self.ttft_s, itl_s=self.itl_s)
        return Round(median, replace(slo, basis=f"median of {len(self.rounds)} paired rounds; "
                                                f"{slo.basis}"))

    def spread(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """((lowest, highest) TTFT target, (lowest, highest) ITL target) over the rounds."""
        ttft = [r.slo.ttft_s for r in self.rounds]
        itl = [r.slo.itl_s for r in self.rounds]
        return (min(ttft), max(ttft)), (min(itl), max(itl))


Targets = SLO | PairedSLO  # what a search is judged by: fixed, or per round
