"""What an engine declares is read through engines.protocol's helpers, which refuse a bad
value by name, and the suite checks every check an engine declares broken against its
registry: a misspelt check or field is a usage error naming it, never a declaration that
silently says nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines import protocol
from engines.factories import EngineSpecError
from engines.protocol import (
    BASE_PARAMS,
    DECLARATIONS,
    arrival_times,
    expected_failed_checks,
    load_settle_s,
    logprobs_of,
    max_concurrency,
    step_by,
    supported_sampling,
    tokenizer_of,
)
from engines.testing.checks import CHECKS
from engines.testing.context import build_context
from examples.toy_engine import ToyEngine

ROOT = str(Path(__file__).resolve().parents[1])


class Bare:
    """Declares nothing: every helper gives its default."""


def test_every_declaration_has_its_default_where_nothing_is_declared() -> None:
    bare = Bare()
    assert supported_sampling(bare) == BASE_PARAMS
    assert expected_failed_checks(bare) == {}
    assert logprobs_of(bare) == "raw"
    assert max_concurrency(bare) is None
    assert protocol.position_thresholds(bare) == {} and protocol.kv_extra_blocks(bare) == 0
    assert load_settle_s(bare) == 0.0 and tokenizer_of(bare) is None
    assert arrival_times(bare) is None and step_by(bare) is None
    protocol.check_declarations(bare)


class Declares:
    supported_sampling = frozenset({"top_k", "lora"})
    expected_failed_checks = {"zero_waste": "static batching computes finished rows"}
    logprobs_of = "processed"
    max_concurrency = 4
    kv_extra_blocks = 1
    load_settle_s = 2
    tokenizer = Path("/tmp/tok")

    def arrival_times(self) -> dict[str, list[float]]:
        return {}

    def step_by(self, deadline: float) -> list[object]:
        return []


def test_what_is_declared_is_read_back() -> None:
    eng = Declares()
    assert supported_sampling(eng) == {"top_k", "lora", "max_tokens"}
    assert expected_failed_checks(eng) == {"zero_waste": "static batching computes finished rows"}
    assert (logprobs_of(eng), max_concurrency(eng)) == ("processed", 4)
    assert (protocol.kv_extra_blocks(eng), load_settle_s(eng)) == (1, 2.0)
    assert tokenizer_of(eng) == "/tmp/tok"
    assert arrival_times(eng) == eng.arrival_times and step_by(eng) == eng.step_by
    assert set(DECLARATIONS) >= {"supported_sampling", "expected_failed_checks", "logprobs_of",
                                 "max_concurrency", "position_thresholds", "kv_extra_blocks",
                                 "load_settle_s", "tokenizer", "arrival_times", "step_by"}


@pytest.mark.parametrize(("attr", "value", "match"), [
    ("supported_sampling", {"top_kk"}, r"supported_sampling: field 'top_kk' does not exist "
                                       r"\(did you mean 'top_k'\?\)"),
    ("supported_sampling", "top_k", r"supported_sampling: 'top_k' is not a set of field names"),
    ("expected_failed_checks", ["zero_waste"], r"expected_failed_checks: \['zero_waste'\] is not a "
                                          r"mapping"),
    ("expected_failed_checks", {"zero_waste": 3}, r"expected_failed_checks: 'zero_waste': 3"),
    ("logprobs_of", "sampled", r"logprobs_of: 'sampled'; expected one of raw, processed"),
    ("max_concurrency", 0, r"max_concurrency: 0; expected an int of at least 1"),
    ("max_concurrency", True, r"max_concurrency: True"),
    ("kv_extra_blocks", -1, r"kv_extra_blocks: -1; expected an int of at least 0"),
    ("load_settle_s", "10", r"load_settle_s: '10'; expected seconds"),
    ("tokenizer", 3, r"tokenizer: 3 is not a path"),
])
def test_a_bad_declaration_is_refused_naming_it(attr: str, value: object, match: str) -> None:
    eng = Bare()
    setattr(eng, attr, value)
    with pytest.raises(ValueError, match=match):
        protocol.check_declarations(eng)


class Misspelt(ToyEngine):
    expected_failed_checks = {"work_conservaton": "serves one row a step"}


class MisspeltField(ToyEngine):
    supported_sampling = frozenset({"temperature", "seed", "top_p", "min_pp"})


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
                                "tests.test_declarations:Misspelt", "-k", "token_range")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --engine tests.test_declarations:Misspelt: "
                                 "expected_failed_checks: check 'work_conservaton' does not "
                                 "exist (did you mean 'work_conservation'?)*"])
