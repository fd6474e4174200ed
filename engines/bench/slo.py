"""Latency targets (SLOs) for goodput, derived per preset from what the hardware does.

Goodput is the request rate at which a stated share of requests (90% by default) meets both a
time-to-first-token target and a mean inter-token-latency target (DistServe, Sarathi-Serve and
`vllm bench serve --goodput` report it so). A fixed target in seconds would mean different
things on a 2-core CPU and a GPU, so the targets are multiples of two timings taken in the same
run on the same hardware (engines.bench.calibration):

- ITL target: `itl_steps` x the decode step of a full uniform batch (every slot busy, short
  contexts): how fast tokens come out when nothing else competes. Sarathi-Serve states its
  inter-token (TBT) targets the same way, as a multiple of a decode iteration's time.
- TTFT target: `ttft_prefills` x the prefill of one longest-class prompt served alone: the
  floor a request of the workload's heaviest class cannot beat, so an idle engine meets the
  target with room to spare. DistServe scales its TTFT targets from single-request latency.

The multiples are stated per preset below, and `--slo-ttft` / `--slo-itl` override the
result. The share is `attainment`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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


# Stated per preset. The ITL multiple is Sarathi-Serve's strict one (5x a decode iteration);
# TTFT allows about two long prefills ahead of a request's own, plus its own.
SLO_RULES: dict[str, SLORule] = {
    "tiny": SLORule(ttft_prefills=3.0, itl_steps=5.0),
    "small": SLORule(ttft_prefills=3.0, itl_steps=5.0),
    "qwen2.5-0.5b": SLORule(ttft_prefills=3.0, itl_steps=5.0),
    "qwen2.5-1.5b": SLORule(ttft_prefills=3.0, itl_steps=5.0),
}
DEFAULT_RULE = SLORule(ttft_prefills=3.0, itl_steps=5.0)  # checkpoints and unknown presets


@dataclass(frozen=True, slots=True)
class HardwareTimes:
    """Two timings of the preset's model on this machine, in this run."""

    step_s: float  # one decode step of a full uniform batch
    prefill_s: float  # prefill of one longest-class prompt, alone
    batch: int  # rows in the uniform batch
    prompt_len: int  # tokens in the longest-class prompt
    basis: str  # what was timed

    def describe(self) -> str:
        return (f"{self.basis}: decode step of {self.batch} rows {self.step_s * 1e3:.3g} ms, "
                f"prefill of {self.prompt_len} tokens {self.prefill_s * 1e3:.3g} ms")


def derive(times: HardwareTimes, preset: str, *, attainment: float = ATTAINMENT) -> SLO:
    rule = SLO_RULES.get(preset, DEFAULT_RULE)
    return SLO(
        ttft_s=rule.ttft_prefills * times.prefill_s,
        itl_s=rule.itl_steps * times.step_s,
        attainment=attainment,
        basis=(f"{preset}: TTFT {rule.ttft_prefills:g} x {times.prompt_len}-token prefill, "
               f"ITL {rule.itl_steps:g} x {times.batch}-row decode step"),
    )
