"""--parity=auto: the mode and tolerance chosen from the precision the engines declare."""

from __future__ import annotations

import pytest

from engines.protocol import KV_CACHE_DTYPES, Capabilities
from engines.testing.precision import (
    FLOOR,
    MEASURED_CONTEXT,
    SIGNIFICANT_BITS,
    choose_parity,
    depth_factor,
    relative_for,
    tolerance_for,
    value_part,
)

FP32, BF16, FP16 = Capabilities(), Capabilities(dtype="bfloat16"), Capabilities(dtype="float16")


def test_every_declarable_format_has_a_tolerance() -> None:
    assert set(KV_CACHE_DTYPES) <= set(SIGNIFICANT_BITS)
    assert tolerance_for("bfloat16") == 0.125  # 2 bf16 ulps at logits 8-16 (measured)
    assert tolerance_for("float16") == 2 ** -6  # 2 fp16 ulps there: 3 bits finer
    assert tolerance_for("float32") == tolerance_for("float64") == FLOOR
    assert tolerance_for("u8") > tolerance_for("bfloat16")  # a quantized cache widens it


def test_float32_everywhere_is_exact() -> None:
    choice = choose_parity("auto", None, {"engine": FP32, "reference engine": FP32})
    assert choice.mode == "exact" and not choice.warnings
    assert "float32" in choice.describe()


def test_bf16_is_tie_aware_and_says_which_declaration() -> None:
    choice = choose_parity("auto", None, {"engine": BF16, "reference engine": BF16})
    assert (choice.mode, choice.tolerance) == ("tie-aware", 0.125)
    assert choice.describe() == ("tie-aware, tolerance 0.125, logprob values against the "
                                 "reference within 0.5 + 0.03125 x |value|, the two sides' own "
                                 "errors summed (auto: engine declares bfloat16)")
    assert choose_parity("auto", None, {"engine": BF16}).describe() == (
        "tie-aware, tolerance 0.125 (auto: engine declares bfloat16)")
    assert choose_parity("auto", None, {"engine": FP16}).tolerance == 2 ** -6


def test_a_quantized_kv_cache_widens_the_tolerance() -> None:
    u8 = Capabilities(dtype="bfloat16", kv_cache_dtype="u8")
    choice = choose_parity("auto", None, {"engine": u8})
    assert choice.tolerance == tolerance_for("u8") > 0.125
    assert "u8 KV cache" in choice.reason
    # A float32 engine with a bf16 cache is not exact either.
    assert choose_parity("auto", None, {"engine": Capabilities(kv_cache_dtype="bf16")}).mode \
        == "tie-aware"


def test_a_reference_at_another_precision_is_a_warning_and_the_coarser_tolerance() -> None:
    choice = choose_parity("auto", None, {"engine": FP16, "reference engine": BF16})
    assert choice.tolerance == 0.125 and "reference engine declares bfloat16" in choice.reason
    assert len(choice.warnings) == 1 and "sequential_fp16" in choice.warnings[0]
    fp64 = choose_parity("auto", None, {"engine": FP32, "reference engine":
                                        Capabilities(dtype="float64")})
    # Exact against itself (float32 throughout), tie-aware against the float64 reference.
    assert (fp64.mode, fp64.versus_reference) == ("exact", "tie-aware")
    assert "reference engine declares float64" in fp64.reference_why
    assert choose_parity("auto", None, {"engine": Capabilities(dtype="float64"),
                                        "reference engine": FP32}).mode == "tie-aware"


def test_batch_invariance_is_exact_against_itself_whatever_the_reference() -> None:
    """Issue 50: an invariant engine beside a reference that is not invariant is exact
    against itself (batched against alone, its invariant variants) and tie-aware against
    the reference; with an invariant reference, exact throughout; a variant that does not
    declare invariance makes the engine's own comparisons tie-aware."""
    invariant = Capabilities(dtype="bfloat16", batch_invariant=True)
    assert choose_parity("auto", None, {"engine": invariant}).mode == "exact"
    both = choose_parity("auto", None, {"engine": invariant, "reference engine": BF16})
    assert (both.mode, both.versus_reference, both.tolerance) == ("exact", "tie-aware", 0.125)
    assert both.relative == 0.0  # the engine's own values: the exact checks' tolerances
    assert (both.reference_value, both.reference_relative) == (0.5, 2 ** -5)
    said = both.describe()
    assert said.startswith("exact against itself (auto: engine declares batch_invariant); "
                           "against the reference, tie-aware, tolerance 0.125"), said
    assert "reference engine declares bfloat16, not batch_invariant" in said
    assert choose_parity("auto", None, {"engine": invariant, "reference engine": invariant}
                         ).versus_reference == "exact"
    plain = choose_parity("auto", None, {"engine": invariant, "reference engine": BF16,
                                         "variant 'plain'": BF16})
    assert (plain.mode, plain.versus_reference) == ("tie-aware", "tie-aware")
    # Explicit settings still win for both comparisons.
    assert choose_parity("tie-aware", None, {"engine": invariant, "reference engine": BF16}
                         ).mode == "tie-aware"
    forced = choose_parity("exact", None, {"engine": invariant, "reference engine": BF16})
    assert (forced.mode, forced.versus_reference) == ("exact", "exact")


def test_against_the_reference_values_allow_the_sum_of_both_sides_own_errors() -> None:
    """Each side deviates from the exact value by its own format's part (value_part):
    llama-server F16 within 0.008 of float32, sequential_fp16 by up to 0.025 (both measured):
    against the reference the value tolerance is the engine's part plus the reference's."""
    fp16 = choose_parity("auto", None, {"engine": FP16, "reference engine": FP16})
    assert value_part(FP16) == (2 * 2 ** -6, 2 ** -9)
    assert (fp16.reference_value, fp16.reference_relative) == (4 * 2 ** -6, 2 * 2 ** -9)
    # The finer side adds its own part, not the coarser one's: never less than before.
    mixed = choose_parity("auto", None, {"engine": BF16, "reference engine": FP32})
    assert mixed.reference_value == 2 * 0.125 + 2 * FLOOR
    assert mixed.reference_relative == relative_for("bfloat16") + relative_for("float32")
    # An explicit tolerance is each side's.
    assert choose_parity("auto", 0.1, {"engine": FP16, "reference engine": FP16}
                         ).reference_value == pytest.approx(0.4)
    # No reference: no reference part; exact: none.
    assert choose_parity("auto", None, {"engine": FP16}).reference_value == 0.0
    assert choose_parity("auto", None, {"engine": FP32, "reference engine": FP32}
                         ).reference_value == 0.0


@pytest.mark.parametrize(("setting", "tolerance", "mode", "expected"), [
    ("exact", None, "exact", 0.125),
    ("tie-aware", 0.5, "tie-aware", 0.5),
    ("auto", 0.5, "tie-aware", 0.5),
    ("tie-aware", None, "tie-aware", 0.125),
])
def test_explicit_settings_win(setting: str, tolerance: float | None, mode: str,
                               expected: float) -> None:
    choice = choose_parity(setting, tolerance, {"engine": BF16})
    assert (choice.mode, choice.tolerance) == (mode, expected)
    assert ("--parity" in choice.reason) == (setting != "auto" or tolerance is not None)


def test_values_are_judged_with_a_part_relative_to_their_magnitude() -> None:
    assert relative_for("bfloat16") == 2 ** -6  # torch.testing's bf16 rtol, 1.6e-2
    assert choose_parity("auto", None, {"engine": BF16}).relative == 2 ** -6
    assert choose_parity("auto", None, {"engine": FP32}).relative == 0.0  # exact: none
    u8 = Capabilities(dtype="bfloat16", kv_cache_dtype="u8")
    assert choose_parity("auto", None, {"engine": u8}).relative == relative_for("u8")


@pytest.mark.parametrize(("engine", "reference", "rule"), [
    (Capabilities(dtype="bfloat16", kv_cache_dtype="u8"), BF16, "top-k"),
    (Capabilities(dtype="int8"), FP32, "top-k"),
    (Capabilities(dtype="int4"), FP32, "top-k"),
    (Capabilities(dtype="bfloat16", kv_cache_dtype="float16"), BF16, "near-tie"),
    (Capabilities(dtype="bfloat16", kv_cache_dtype="u8"),
     Capabilities(dtype="bfloat16", kv_cache_dtype="u8"), "near-tie"),  # the same quantization
    (BF16, BF16, "near-tie"),
])
def test_a_quantized_engine_is_compared_with_its_reference_by_top_k(
        engine: Capabilities, reference: Capabilities, rule: str) -> None:
    choice = choose_parity("auto", None, {"engine": engine, "reference engine": reference})
    assert choice.reference_rule == rule
    assert ("top-5 membership" in choice.describe()) == (rule == "top-k")
    # Without a reference, or under exact parity, there is nothing to judge so.
    assert choose_parity("auto", None, {"engine": engine}).reference_rule == "near-tie"
    assert choose_parity("exact", None, {"engine": engine, "reference engine": reference}
                         ).reference_rule == "near-tie"


def test_a_values_tolerance_grows_as_the_square_root_of_its_position() -> None:
    assert depth_factor(1) == depth_factor(MEASURED_CONTEXT) == 1.0
    assert depth_factor(4 * MEASURED_CONTEXT) == 2.0
