"""`--parity=auto`: the parity judgment and its tolerance, chosen from the precision every
engine compared declares (Capabilities.dtype, kv_cache_dtype, batch_invariant).

Exact parity is free only where batched and alone runs agree to the bit: float32 compute with
a float32 KV cache (reductions reordered by batching move fp32 logits by ~1e-6, far below any
gap greedy decoding meets on our presets), or an engine that declares its rows batch
invariant. Anywhere else a batch's different reduction order legitimately flips near-ties,
and the suite compares tie-aware, with a tolerance of a few ulps at the logits' scale for the
coarsest format any engine compared computes or caches in (docs/usage.md, "Tie-aware parity").
An explicit --parity / --parity-tolerance always wins over the choice.

The choice is per comparison. An engine that declares batch invariance is held to exact
parity against itself (batched against alone, its variants that declare it too) whatever the
reference; against a reference that neither declares invariance nor computes in float32 it is
compared tie-aware, with the derived tolerance (ParityChoice.reference_mode).

Two more choices ride on the tie-aware one. A logprob value of one run deviates from the
exact value by up to twice its format's tolerance (the logit and the normaliser), grown with
the context's length past the measured ones, plus two ulps of the value's own magnitude
(VALUE_TERMS, `depth_factor`, `relative_for`): batched against alone, the engine's two runs
differ by that much; against the reference, each side errs by its own format's part, so the
tolerance is the sum of the two (`value_part`; the reference's part measured in
`value_part`'s docstring). And an
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
           "depth_factor", "relative_for", "tolerance_for", "value_part"]

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
# context, what the near-tie rule judges) cancels the normaliser; a value does not, so one
# run's value errs by up to the tolerance twice (value_part: measured within 0.6 of it).
# Batched against alone, the engine's two runs round the same weights, rotary angles and
# activations in the same format and differ only in reduction order: one part bounds their
# gap (vLLM in bf16 against our bf16 reference: -7.99 against -8.13, 0.137, past 0.125).
# Against the reference, two implementations each err by their own part: the sum.
# The margin rule does not double count so: G is a gap between two runs (measured batched
# against alone, and alone against the reference: scripts/precision_margins.py), each side
# at most one ulp of the two; where the sides' formats differ, the coarser G bounds the sum
# of their halves.
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
    # The parity of comparisons against the reference engine where it is not `mode` (None:
    # `mode`): an engine declaring batch invariance is exact against itself and tie-aware
    # against a reference that is not invariant (module docstring), and why.
    reference_mode: ParityMode | None = None
    reference_why: str = ""
    # Tie-aware against the reference: a logprob value's tolerance, the sum of the engine's
    # and the reference's own parts (value_part): absolute (grown with the position by
    # depth_factor) and per unit of the value. 0 where there is no reference.
    reference_value: float = 0.0
    reference_relative: float = 0.0

    @property
    def versus_reference(self) -> ParityMode:
        """The parity of comparisons against the reference engine."""
        return self.reference_mode or self.mode

    def describe(self) -> str:
        if self.mode == "exact" and self.versus_reference == "tie-aware":
            return (f"exact against itself ({self.reason}); against the reference, tie-aware, "
                    f"tolerance {self.tolerance:g}{self._values()} ({self.reference_why})"
                    + self._top_k())
        if self.mode == "exact":
            return f"exact ({self.reason})"
        return (f"tie-aware, tolerance {self.tolerance:g}{self._values()} ({self.reason})"
                + self._top_k())

    def _values(self) -> str:
        if not self.reference_value:
            return ""
        return (f", logprob values against the reference within {self.reference_value:g} + "
                f"{self.reference_relative:g} x |value|, the two sides' own errors summed")

    def _top_k(self) -> str:
        if self.reference_rule != "top-k":
            return ""
        return (f"; against the reference, top-{TOP_K} membership "
                f"(check_logprobs_close's rule: {self.reference_reason})")


def value_part(caps: Capabilities, tolerance: float | None = None) -> tuple[float, float]:
    """One engine's own error on a logprob value under tie-aware parity, as (absolute part at
    contexts up to MEASURED_CONTEXT, part per unit of the value): VALUE_TERMS times its
    coarsest declared format's tolerance (or `tolerance`, given explicitly), and relative_for
    that format. Two runs compared each deviate from the exact value by their own part, so a
    comparison of the engine with the reference allows the sum of the two parts.

    Measured (scripts/value_drift.py: the tiny preset, 6 prompts of 512 tokens, the top-5
    logprobs of each position against the float32 model, the closest we have to exact
    values): our reference in float16 (`sequential_fp16`) deviates by at most 0.015 at
    positions 1-49, 0.027 at 50-149, 0.025 at 150-299, 0.025 at 300-511; in bfloat16 by
    0.118, 0.151, 0.153, 0.173: at most 0.57 (float16) and 0.47 (bfloat16) of its part at
    each position (2 x 2**-6 and 2 x 0.125, grown by depth_factor, plus 2 ulps of the value).
    llama-server's F16 GGUF is within 0.008 of float32 (docs/engines.md note f), vLLM's bf16
    within 0.105. A tolerance of one part, as values against the reference had before, fails
    two sides erring the opposite ways: llama-server F16 and sequential_fp16 parted by 0.065
    on a 71-token prompt (-4.0256 against -4.0907), past one part's 0.039."""
    fmt = _coarsest({"engine": caps})[0]
    part = tolerance if tolerance is not None else tolerance_for(fmt)
    return VALUE_TERMS * part, relative_for(fmt)


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
    if choice.mode == "exact" and choice.versus_reference == "exact":
        return choice
    fmt, _ = _coarsest(declared)
    if choice.mode == "tie-aware":
        choice = dataclasses.replace(choice, relative=relative_for(fmt))
    engine, ref = next(iter(declared.values())), declared.get(REFERENCE)
    if ref is not None:  # each side's own error on a value (value_part)
        mine, theirs = value_part(engine, tolerance), value_part(ref, tolerance)
        choice = dataclasses.replace(choice, reference_value=mine[0] + theirs[0],
                                     reference_relative=mine[1] + theirs[1])
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
        if not uneven or uneven == [REFERENCE]:
            mine = [who for who in declared if who not in uneven]
            invariant = [who for who in mine if declared[who].batch_invariant]
            verb = "declares" if len(invariant) == 1 else "declare"
            said = (f"{' and '.join(invariant)} {verb} batch_invariant" if invariant
                    else "every engine compared computes float32 with a float32 KV cache")
            if not uneven:
                return ParityChoice("exact", derived, f"auto: {said}", warnings)
            # Exact against itself; the reference rounds otherwise whatever the batch.
            ref = declared[REFERENCE]
            return ParityChoice(
                "exact", tolerance if tolerance is not None else derived, f"auto: {said}",
                warnings, reference_mode="tie-aware",
                reference_why=(f"auto: the {REFERENCE} declares {_precision(ref)}, not "
                               f"batch_invariant; the tolerance as {why}"
                               + (f"; tolerance {flags[1]}" if tolerance is not None else "")))
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
