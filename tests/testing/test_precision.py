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
    assert choice.describe() == "tie-aware, tolerance 0.125 (auto: engine declares bfloat16)"
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
    assert fp64.mode == "tie-aware" and "reference engine declares float64" in fp64.reason


def test_batch_invariance_is_exact_only_where_every_engine_compared_declares_it() -> None:
    invariant = Capabilities(dtype="bfloat16", batch_invariant=True)
    assert choose_parity("auto", None, {"engine": invariant}).mode == "exact"
    assert choose_parity("auto", None, {"engine": invariant,
                                        "reference engine": BF16}).mode == "tie-aware"


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
