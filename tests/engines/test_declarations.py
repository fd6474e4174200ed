"""What an engine supports is one engines.protocol.Capabilities, returned by its optional
`capabilities()` and read through capabilities_of(engine): each bad value is refused by name
when the Capabilities is made, an engine without the method still has its plain attributes
read for one release (with a DeprecationWarning saying what to write instead), and the suite
checks every check an engine declares broken against its registry: a misspelt check or field
is a usage error naming it, never a declaration that silently says nothing."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import pytest

from engines import protocol
from engines.bench import declarations as bench
from engines.factories import EngineSpecError
from engines.protocol import (
    BASE_PARAMS,
    DECLARATIONS,
    DTYPES,
    KV_CACHE_DTYPES,
    PROCESSING_PARAMS,
    Capabilities,
    capabilities_of,
)
from engines.testing.checks import CHECKS
from engines.testing.context import build_context
from examples.toy_engine import ToyEngine

ROOT = str(Path(__file__).resolve().parents[2])


class Bare:
    """Declares nothing: every field has its default, and nothing warns."""


def test_every_field_has_its_default_where_nothing_is_declared() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = capabilities_of(Bare())
        protocol.check_declarations(Bare())
    assert found == Capabilities()
    assert found.supported_sampling == BASE_PARAMS and found.output_fields == frozenset()
    assert found.expected_failed_checks == {} and found.logprobs_of == "raw"
    assert found.max_concurrency is None and found.position_thresholds == {}
    assert (found.kv_extra_blocks, found.load_settle_s, found.tokenizer) == (0, 0.0, None)
    assert (found.dtype, found.kv_cache_dtype, found.batch_invariant) == ("float32", None, False)
    assert found.kv_dtype == "float32"
    assert set(DECLARATIONS) == {f.name for f in dataclasses.fields(Capabilities)}


class Declares:
    def capabilities(self) -> Capabilities:
        return Capabilities(
            supported_sampling=frozenset({"top_k", "lora"}),
            expected_failed_checks={"zero_waste": "static batching computes finished rows"},
            logprobs_of="processed", max_concurrency=4, kv_extra_blocks=1, load_settle_s=2,
            tokenizer="/tmp/tok", dtype="bf16", kv_cache_dtype="u8", batch_invariant=True)


def test_what_is_declared_is_read_back() -> None:
    found = capabilities_of(Declares())
    assert found.supported_sampling == {"top_k", "lora", "max_tokens"}
    assert found.expected_failed_checks == {"zero_waste": "static batching computes finished rows"}
    assert (found.logprobs_of, found.max_concurrency) == ("processed", 4)
    assert (found.kv_extra_blocks, found.load_settle_s) == (1, 2.0)
    assert found.tokenizer == "/tmp/tok"
    # A library's spelling of a dtype is read as the name it stands for.
    assert (found.dtype, found.kv_cache_dtype, found.kv_dtype) == ("bfloat16", "u8", "u8")
    assert found.batch_invariant is True
    with pytest.raises(TypeError):  # frozen: what an engine said stays said
        found.expected_failed_checks["seeds"] = "later"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.dtype = "float16"  # type: ignore[misc]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("supported_sampling", {"top_kk"}, r"supported_sampling: field 'top_kk' does not exist "
                                       r"\(did you mean 'top_k'\?\)"),
    ("supported_sampling", "top_k", r"supported_sampling: 'top_k' is not a set of field names"),
    ("output_fields", {"cached_prompt_token"}, r"output_fields: field 'cached_prompt_token' "
                                               r"does not exist \(did you mean "
                                               r"'cached_prompt_tokens'\?\)"),
    ("expected_failed_checks", ["zero_waste"], r"expected_failed_checks: \['zero_waste'\] is not a "
                                          r"mapping"),
    ("expected_failed_checks", {"zero_waste": 3}, r"expected_failed_checks: 'zero_waste': 3"),
    ("logprobs_of", "sampled", r"logprobs_of: 'sampled'; expected one of raw, processed"),
    ("max_concurrency", 0, r"max_concurrency: 0; expected an int of at least 1"),
    ("max_concurrency", True, r"max_concurrency: True"),
    ("position_thresholds", {"sliding window": 0}, r"position_thresholds: 'sliding window' is "
                                                   r"0; expected a positive int"),
    ("position_thresholds", [4096], r"position_thresholds: \[4096\] is not a mapping"),
    ("kv_extra_blocks", -1, r"kv_extra_blocks: -1; expected an int of at least 0"),
    ("load_settle_s", "10", r"load_settle_s: '10'; expected seconds"),
    ("tokenizer", 3, r"tokenizer: 3 is not a path"),
    ("tokenizer", Path("/tmp/tok"), None),  # a path-like is read as its str
    ("dtype", "bfloat61", r"dtype: 'bfloat61' does not exist \(did you mean 'bfloat16'\?\)"),
    ("dtype", "u8", r"dtype: 'u8' does not exist"),  # a KV cache's dtype, not the weights'
    ("dtype", 16, r"dtype: 16 is not a dtype name; expected one of float32, "),
    ("kv_cache_dtype", "q8", r"kv_cache_dtype: 'q8' does not exist \(did you mean 'q8_0'\?\)"),
    ("batch_invariant", 1, r"batch_invariant: 1; expected True or False"),
])
def test_a_bad_value_is_refused_naming_the_field_and_the_value(field: str, value: object,
                                                               match: str | None) -> None:
    if match is None:
        assert Capabilities(**{field: value}).tokenizer == "/tmp/tok"  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match=match):
        Capabilities(**{field: value})  # type: ignore[arg-type]


def test_the_dtype_names_are_stated() -> None:
    assert DTYPES[:3] == ("float32", "bfloat16", "float16")
    assert set(DTYPES) < set(KV_CACHE_DTYPES) and {"u8", "fp8", "q8_0", "int8"} <= set(
        KV_CACHE_DTYPES)


def test_quantized_weights_are_declarable_and_have_a_tolerance() -> None:
    # CTranslate2's int8 compute type and onnxruntime-genai's int4 model quantize the weights
    # (engines.adapters.ct2.adapter.COMPUTE_TYPES, engines.adapters.ortgenai.adapter.PRECISIONS).
    from engines.testing.precision import tolerance_for

    assert Capabilities(dtype="int8").dtype == "int8"
    assert Capabilities(dtype="i8", kv_cache_dtype="fp32").kv_dtype == "float32"
    # --parity=auto derives a tolerance for every dtype an engine may declare.
    assert all(tolerance_for(d) > 0 for d in KV_CACHE_DTYPES)


def test_a_capabilities_that_is_not_one_is_refused() -> None:
    class Wrong:
        def capabilities(self) -> dict[str, object]:
            return {"supported_sampling": {"top_k"}}

    class NotAMethod:
        capabilities = Capabilities()

    with pytest.raises(ValueError, match=r"capabilities\(\): returned \{'supported_sampling'"):
        capabilities_of(Wrong())
    with pytest.raises(ValueError, match=r"capabilities: Capabilities\(.*\) is not a method"):
        capabilities_of(NotAMethod())


class OldStyle:
    """A third party's engine as written before Capabilities: plain attributes."""

    supported_sampling = frozenset({"top_k", "lora"})
    expected_failed_checks = {"zero_waste": "static batching computes finished rows"}
    logprobs_of = "processed"
    max_concurrency = 4
    kv_extra_blocks = 1
    load_settle_s = 2
    tokenizer = Path("/tmp/tok")
    dtype = object()  # a library's own attribute of that name: never read as a declaration


def test_plain_attributes_are_still_read_with_a_warning_saying_what_to_write() -> None:
    protocol._warned.discard(OldStyle)
    with pytest.warns(DeprecationWarning) as caught:
        found = capabilities_of(OldStyle())
    [warning] = caught
    text = str(warning.message)
    assert text.startswith(f"{__name__}.OldStyle declares supported_sampling, "
                           "expected_failed_checks, logprobs_of, max_concurrency, "
                           "kv_extra_blocks, load_settle_s, tokenizer as plain attributes")
    assert ("`def capabilities(self) -> engines.protocol.Capabilities: return "
            "Capabilities(supported_sampling=..., expected_failed_checks=..., ") in text
    assert found == Capabilities(
        supported_sampling=frozenset({"top_k", "lora"}),
        expected_failed_checks={"zero_waste": "static batching computes finished rows"},
        logprobs_of="processed", max_concurrency=4, kv_extra_blocks=1, load_settle_s=2,
        tokenizer="/tmp/tok")
    # Once per class: the suite reads declarations many times a run.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert capabilities_of(OldStyle()) == found


def test_a_bad_plain_attribute_is_refused_as_a_bad_field_is() -> None:
    class OldMisspelt:
        supported_sampling = frozenset({"min_pp"})

    with pytest.warns(DeprecationWarning), pytest.raises(
            ValueError, match=r"supported_sampling: field 'min_pp' does not exist \(did you "
                              r"mean 'min_p'\?\)"):
        capabilities_of(OldMisspelt())


def test_the_old_readers_and_names_still_work_and_say_what_replaces_them() -> None:
    with pytest.warns(DeprecationWarning, match=r"engines.protocol.supported_sampling\(engine\) "
                                                r"is deprecated: use capabilities_of\(engine\)"
                                                r".supported_sampling"):
        assert protocol.supported_sampling(Declares()) == {"top_k", "lora", "max_tokens"}
    with pytest.warns(DeprecationWarning, match=r"capabilities_of\(engine\).tokenizer"):
        assert protocol.tokenizer_of(Declares()) == "/tmp/tok"
    with pytest.warns(DeprecationWarning, match="BASE_PARAMS | PROCESSING_PARAMS"):
        assert protocol.ALL_PARAMS == BASE_PARAMS | PROCESSING_PARAMS  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="CONSTRAINT_PARAMS | OUTPUT_PARAMS"):
        assert "guided" in protocol.WAVE4_FIELDS  # type: ignore[attr-defined,operator]
    with pytest.raises(AttributeError, match=r"step_by moved: use "
                                             r"engines.bench.declarations.step_by"):
        protocol.step_by  # type: ignore[attr-defined]  # noqa: B018


class Streams:
    compute_threads = 2
    execution = "a library on CPU"

    def arrival_times(self) -> dict[str, list[float]]:
        return {}

    def step_by(self, deadline: float) -> list[object]:
        return []


def test_the_benchs_own_declarations_are_read_by_the_bench() -> None:
    eng = Streams()
    assert (bench.compute_threads(eng), bench.execution(eng)) == (2, "a library on CPU")
    assert bench.arrival_times(eng) == eng.arrival_times and bench.step_by(eng) == eng.step_by
    bare = Bare()
    assert (bench.compute_threads(bare), bench.execution(bare)) == (None, "")
    assert bench.arrival_times(bare) is None and bench.step_by(bare) is None
    assert not set(bench.BENCH_DECLARATIONS) & set(DECLARATIONS)
    eng.compute_threads = 0
    with pytest.raises(ValueError, match=r"compute_threads: 0; expected an int of at least 1"):
        bench.compute_threads(eng)


class Misspelt(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(expected_failed_checks={"work_conservaton": "serves one row a step"})


class MisspeltField(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(supported_sampling=frozenset({"temperature", "seed", "top_p",
                                                          "min_pp"}))


def test_a_misspelt_check_is_a_usage_error_naming_it_and_the_nearest() -> None:
    assert "work_conservation" in CHECKS
    with pytest.raises(EngineSpecError, match=r"Misspelt: expected_failed_checks: check "
                                              r"'work_conservaton' does not exist \(did you mean "
                                              r"'work_conservation'\?\); expected one of "):
        build_context(Misspelt, name="Misspelt")


def test_a_misspelt_field_is_a_usage_error_naming_it() -> None:
    with pytest.raises(EngineSpecError, match=r"MisspeltField: supported_sampling: field "
                                              r"'min_pp' does not exist \(did you mean "
                                              r"'min_p'\?\)"):
        build_context(MisspeltField, name="MisspeltField")


def test_a_variant_is_held_to_it_too() -> None:
    from engines.testing.context import SuiteOptions

    with pytest.raises(EngineSpecError, match=r"typo engine: expected_failed_checks: check "
                                              r"'work_conservaton'"):
        build_context(ToyEngine, name="ToyEngine",
                      options=SuiteOptions(variants={"typo": Misspelt}))


def test_the_suite_run_says_so(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
                               ) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev",
                                "--pyargs", "engines.testing.conformance", "--engine",
                                "tests.engines.test_declarations:Misspelt", "-k", "token_range")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --engine tests.engines.test_declarations:Misspelt: "
                                 "expected_failed_checks: check 'work_conservaton' does not "
                                 "exist (did you mean 'work_conservation'?)*"])
