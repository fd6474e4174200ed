"""`--parity=auto`: the parity judgment and its tolerance, chosen from the precision every
engine compared declares (Capabilities.dtype, kv_cache_dtype, batch_invariant).

Exact parity is free only where batched and alone runs agree to the bit: float32 compute with
a float32 KV cache (reductions reordered by batching move fp32 logits by ~1e-6, far below any
gap greedy decoding meets on our presets), or an engine that declares its rows batch
invariant. Anywhere else a batch's different reduction order legitimately flips near-ties,
and the suite compares tie-aware, with a tolerance of a few ulps at the logits' scale for the
coarsest format any engine compared computes or caches in (docs/usage.md, "Tie-aware parity").
An explicit --parity / --parity-tolerance always wins over the choice.

Two more choices ride on the tie-aware one. Logprob values are compared within twice the
tolerance, grown with the context's length past the measured ones, plus two ulps of the
value's own magnitude (VALUE_TERMS, `depth_factor`, `relative_for`). And an
engine that computes or caches in a quantized format (QUANTIZED) that its reference engine
does not is compared with the reference by the top-k rule of vLLM's `check_logprobs_close`
(a diverging token among the other run's top candidates; the comparison ends there), not by
the near-tie rule: the quantization moves logits by more than batching does, and no
tolerance of a few ulps tells it from a bug. Batched against alone, the engine meets its own
quantization both times and stays tie-aware.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engines.protocol import Capabilities
from engines.testing.oracle import TOP_K, ParityMode

__all__ = ["EXACT_DTYPE", "FLOOR", "MEASURED_CONTEXT", "QUANTIZED", "SIGNIFICANT_BITS",
           "VALUE_TERMS", "ParityChoice", "ParitySetting", "ReferenceRule", "choose_parity",
           "depth_factor", "relative_for", "tolerance_for"]

ParitySetting = Literal["auto", "exact", "tie-aware"]  # what a run asks for
# How reference_parity judges a greedy divergence: by the parity (exact, or the near-tie rule
# within the tolerance), or by top-k membership (a quantized engine against a reference that
# is not: module docstring).
ReferenceRule = Literal["near-tie", "top-k"]
EXACT_DTYPE = "float32"

# Significant bits of each format's values (the implicit leading bit counted): the precision a
# logit computed or cached in it keeps. A quantized integer cache (one scale per block or
# token, over the block's range) keeps one bit less than its width: the sign or the offset
# spends it.
SIGNIFICANT_BITS: Mapping[str, int] = {
    "float64": 53, "float32": 24, "float16": 11, "bfloat16": 8,
    "fp8": 4, "fp8_e4m3": 4, "fp8_e5m2": 3,
    "int8": 7, "u8": 7, "q8_0": 7, "int4": 3, "q4_0": 3,
}
# The logit scale the ulps are taken at: a format with p significant bits rounds a logit in
# [8, 16) in steps of 8 * 2**(1 - p) (bfloat16's 1/16, float16's 1/128). Trained models' top
# logits reach 8-16 and beyond; the presets' seeded weights give top logits of 2.8 to 5.6
# (scripts/precision_margins.py), where the same tolerance is 4 ulps.
LOGIT_SCALE = 8.0
# Two steps there. Measured (scripts/precision_margins.py, 32 greedy requests of 24 tokens):
# our continuous and paged engines in bf16 diverge batched against alone at margins of 0.016
# to 0.0625 (1-2 ulps at their logits' scale), and from the bf16 reference at 0.031; in fp16
# at 0.002 (one divergence). 0.125 and 2**-6 forgive each of them, with a factor of 2 and 8
# to spare.
ULPS = 2
# The tolerance never drops below the fp32 one (the suite's tie-aware default before auto):
# a float32 engine compared with a float64 reference, or tie-aware on request, differs by
# reduction order through every layer, which is far more than one fp32 ulp at the logits.
FLOOR = 1e-3
# Formats no reference engine of ours computes or caches in: integer weights or caches (a
# scale per block or token) and fp8. Against a reference without them, their error is the
# quantization's, not a rounding's.
QUANTIZED = frozenset({"int8", "int4", "u8", "q8_0", "q4_0", "fp8", "fp8_e4m3", "fp8_e5m2"})


def tolerance_for(fmt: str) -> float:
    """The tie-aware tolerance (a logprob gap) for values computed or cached in `fmt`."""
    return max(FLOOR, ULPS * LOGIT_SCALE * 2.0 ** (1 - SIGNIFICANT_BITS[fmt]))


# A logprob value is a logit less the log-sum-exp of all (the normaliser): two terms, each
# moved by reduced precision by up to the tolerance. A margin (the gap of two values at one
# context, what the near-tie rule judges) cancels the normaliser; a value does not, so its
# absolute part is the tolerance twice. Measured, vLLM in bf16 against our bf16 reference:
# prompt logprobs -7.99 against -8.13 (0.137 apart) and, at position 343 of a 445-token
# prompt, -3.21 against -3.39 (0.184): both past 0.125, within 0.25.
VALUE_TERMS = 2
# The longest context G was measured over (scripts/precision_margins.py: prompts of 3 to 70
# tokens, 24 generated).
MEASURED_CONTEXT = 94


def depth_factor(position: int) -> float:
    """How much a logprob value's tolerance grows at `position` of its context (tie-aware
    parity). Attention at position i sums i + 1 rounded products, and rounding errors of a sum
    grow as the square root of its terms (they walk at random: the probabilistic bound of
    Higham and Mary), so past the contexts G was measured over it grows by
    sqrt(position / MEASURED_CONTEXT). Measured on the tiny preset's 445-token prompt that
    vLLM's bf16 run met: sequential_bf16's prompt logprobs part from the fp32 reference's by
    at most 0.066 at positions 1-49, 0.090 at 50-149, 0.138 at 150-299 and 0.287 at 300-444
    (vLLM's bf16 by 0.083, 0.079, 0.069, 0.105); vLLM's and ours parted by 0.399 at position
    325 (a top candidate, -4.16 against -3.76), within 0.25 * 1.86 + 2**-6 * 4.16 = 0.53."""
    return max(1.0, math.sqrt(position / MEASURED_CONTEXT))


def relative_for(fmt: str) -> float:
    """The part of a logprob value's tolerance that grows with the value (tie-aware parity):
    ULPS ulps of `fmt` at the value's own magnitude. The tolerance is taken at logits of
    LOGIT_SCALE; an unlikely token's logit lies far from the top's (its value is large because
    the two are far apart), where its rounding is coarser. For bfloat16 this is 2**-6,
    torch.testing.assert_close's default rtol for bfloat16 (1.6e-2). The values' rule, at
    position i of the context: |a - b| <= VALUE_TERMS * tolerance * depth_factor(i) +
    relative * max(|a|, |b|)."""
    return ULPS * 2.0 ** (1 - SIGNIFICANT_BITS[fmt])


@dataclass(frozen=True, slots=True)
class ParityChoice:
    """The parity the suite judges by in this run, and why (the header and summary say it)."""

    mode: ParityMode
    tolerance: float
    reason: str  # "auto: engine declares bfloat16", "--parity", ...
    warnings: tuple[str, ...] = ()  # engines compared at different precisions
    # Tie-aware: the logprob values' tolerance grows by this much per unit of the value
    # (relative_for; 0 under exact parity, whose value tolerances are the checks' own).
    relative: float = 0.0
    # How reference_parity judges a divergence, and why where it is "top-k".
    reference_rule: ReferenceRule = "near-tie"
    reference_reason: str = ""

    def describe(self) -> str:
        if self.mode == "exact":
            return f"exact ({self.reason})"
        said = f"tie-aware, tolerance {self.tolerance:g} ({self.reason})"
        if self.reference_rule == "top-k":
            said += (f"; against the reference, top-{TOP_K} membership "
                     f"(check_logprobs_close's rule: {self.reference_reason})")
        return said


def _precision(caps: Capabilities) -> str:
    kv = caps.kv_dtype
    return caps.dtype if kv == caps.dtype else f"{caps.dtype} with a {kv} KV cache"


def _coarsest(declared: Mapping[str, Capabilities]) -> tuple[str, str]:
    """The coarsest format any engine compared computes or caches in, and which declares it
    (the first named, on a tie: the engine before the reference before the variants)."""
    found: list[tuple[int, int, str, str]] = []
    for order, (who, caps) in enumerate(declared.items()):
        found.append((SIGNIFICANT_BITS[caps.dtype], order, caps.dtype, f"{who} declares "
                      f"{caps.dtype}"))
        if caps.kv_cache_dtype is not None and caps.kv_cache_dtype != caps.dtype:
            kv = caps.kv_cache_dtype
            found.append((SIGNIFICANT_BITS[kv], order, kv, f"{who} declares a {kv} KV cache"))
    _, _, fmt, why = min(found)
    return fmt, why


def _mismatches(declared: Mapping[str, Capabilities]) -> tuple[str, ...]:
    """A line for each engine compared at another precision than the engine under test: its
    own roundings then move tokens that no batching touched."""
    items = list(declared.items())
    if not items:
        return ()
    engine_who, engine = items[0]
    mine = _precision(engine)
    lines = []
    for who, caps in items[1:]:
        theirs = _precision(caps)
        if theirs != mine:
            lines.append(
                f"the {who} computes in {theirs}, the {engine_who} in {mine}: its own "
                "roundings move tokens no batching touched, and the tolerance is the coarser "
                "one's; give it the engine's precision (our reference at each: "
                "engines.sequential:sequential_bf16, sequential_fp16; docs/engines.md)")
    return tuple(lines)


def _quantized_unmatched(declared: Mapping[str, Capabilities]) -> str | None:
    """Why the reference is judged by top-k membership (module docstring): the engine under
    test computes or caches in a quantized format where the reference engine does not (None:
    it does not, or there is no reference)."""
    items = list(declared.items())
    ref = declared.get(REFERENCE)
    if not items or ref is None:
        return None
    who, engine = items[0]
    for what, mine, theirs in (("weights are", engine.dtype, ref.dtype),
                               ("KV cache is", engine.kv_dtype, ref.kv_dtype)):
        if mine in QUANTIZED and mine != theirs:
            return (f"the {who}'s {what} {mine}, the {REFERENCE}'s {theirs}: the "
                    "quantization moves logits by more than a near-tie")
    return None


REFERENCE = "reference engine"  # the reference's name in `declared`


def choose_parity(setting: str, tolerance: float | None,
                  declared: Mapping[str, Capabilities], *,
                  flags: tuple[str, str] = ("--parity", "--parity-tolerance")) -> ParityChoice:
    """The parity for a run that asks for `setting` ("auto", "exact" or "tie-aware") and
    `tolerance` (None: derived), over the engines compared: `declared` maps each one's name in
    messages ("engine" first, then "reference engine", "variant NAME") to its Capabilities.
    `flags` are this run's spellings of the parity and tolerance options."""
    choice = _choose(setting, tolerance, declared, flags)
    if choice.mode == "exact":
        return choice
    fmt, _ = _coarsest(declared)
    choice = dataclasses.replace(choice, relative=relative_for(fmt))
    quantized = _quantized_unmatched(declared)
    if quantized is None:
        return choice
    return dataclasses.replace(choice, reference_rule="top-k", reference_reason=quantized)


def _choose(setting: str, tolerance: float | None, declared: Mapping[str, Capabilities],
            flags: tuple[str, str]) -> ParityChoice:
    fmt, why = _coarsest(declared)
    warnings = _mismatches(declared)
    derived = tolerance_for(fmt)
    if setting == "auto":
        uneven = [who for who, caps in declared.items()
                  if not caps.batch_invariant and (caps.dtype, caps.kv_dtype)
                  != (EXACT_DTYPE, EXACT_DTYPE)]
        if not uneven:
            invariant = [who for who, caps in declared.items() if caps.batch_invariant]
            verb = "declares" if len(invariant) == 1 else "declare"
            said = (f"{' and '.join(invariant)} {verb} batch_invariant" if invariant
                    else "every engine compared computes float32 with a float32 KV cache")
            return ParityChoice("exact", derived, f"auto: {said}", warnings)
        if fmt in (EXACT_DTYPE, "float64"):  # wider than float32 somewhere: say where
            who = uneven[0]
            why = f"{who} declares {_precision(declared[who])}"
        if tolerance is not None:
            return ParityChoice("tie-aware", tolerance, f"auto: {why}; tolerance {flags[1]}",
                                warnings)
        return ParityChoice("tie-aware", derived, f"auto: {why}", warnings)
    if setting == "exact":
        return ParityChoice("exact", derived, f"{flags[0]}=exact", warnings)
    if tolerance is not None:
        return ParityChoice("tie-aware", tolerance, f"{flags[0]}=tie-aware, {flags[1]}",
                            warnings)
    return ParityChoice("tie-aware", derived,
                        f"{flags[0]}=tie-aware; tolerance from the declarations: {why}", warnings)
