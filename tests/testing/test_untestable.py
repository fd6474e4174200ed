"""Declarations checked when the run starts (issue 51 item 5): a declared feature the run cannot
test is a warning line in the header, with what to add, not a skip reason found only in the
closing summary; a misspelt field names the fields that declare what it names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.protocol import DECLARABLE_FIELDS, FIELD_SYNONYMS, Capabilities
from engines.testing.context import SuiteOptions, build_context
from engines.testing.features import FEATURES
from engines.testing.untestable import untestable
from examples.toy_engine import ToyEngine

ROOT = str(Path(__file__).resolve().parents[2])
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance", "--torch-threads=1", "-q")
WARNING = "batching-engines: warning: "


class StopWithoutTokenizer(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(supported_sampling=frozenset({"stop", "include_stop_str_in_output"}))


class StopAlone(ToyEngine):  # include_stop_str_in_output not declared
    def capabilities(self) -> Capabilities:
        return Capabilities(supported_sampling=frozenset({"stop"}), tokenizer=ROOT)


class TopK(ToyEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(supported_sampling=frozenset({"temperature", "top_k"}))


ENGINES = """
from engines.protocol import Capabilities
from examples.toy_engine import ToyEngine

class StopWithoutTokenizer(ToyEngine):
    def capabilities(self):
        return Capabilities(supported_sampling=frozenset({"stop", "include_stop_str_in_output"}))

class Misspelt(ToyEngine):
    def capabilities(self):
        return Capabilities(supported_sampling=frozenset({"stop_strings"}))
"""


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def test_a_misspelt_feature_names_its_fields_not_the_nearest_letters() -> None:
    with pytest.raises(ValueError) as caught:
        Capabilities(supported_sampling=frozenset({"stop_strings"}))
    text = str(caught.value)
    assert "the fields that declare it: 'stop', 'include_stop_str_in_output'" in text, text
    assert "stop_token_ids" not in text
    with pytest.raises(ValueError, match=r"did you mean 'top_k'\?"):  # a typo: by its letters
        Capabilities(supported_sampling=frozenset({"top_kk"}))


def test_every_feature_name_is_a_field_or_names_its_fields() -> None:
    """The suggestions come from the feature names: each feature an engine declares something
    for is a field itself, or FIELD_SYNONYMS says which fields declare it."""
    for feature in FEATURES:
        if feature.needs != "nothing" and feature.name not in DECLARABLE_FIELDS:
            assert feature.name in FIELD_SYNONYMS, feature.name
    for name, fields in FIELD_SYNONYMS.items():
        assert name not in DECLARABLE_FIELDS and set(fields) <= DECLARABLE_FIELDS, name


def test_each_untestable_declaration_says_what_to_add() -> None:
    stop = untestable(build_context(StopWithoutTokenizer, name="S"))
    assert len(stop) == 1 and "S declares include_stop_str_in_output, stop but no tokenizer" \
        in stop[0] and "add tokenizer=DIR" in stop[0], stop
    half = untestable(build_context(StopAlone, name="H"))
    assert any("H declares stop but not include_stop_str_in_output" in s for s in half), half
    assert any("holds no tokenizer.json" in s for s in half), half  # ROOT is no tokenizer dir
    unshared = untestable(build_context(TopK, name="T", options=SuiteOptions(
        reference=ToyEngine)))
    assert unshared == ["T declares top_k, which the reference engine does not: only what every "
                        "engine compared declares is drawn, so these are not tested in this "
                        "run; declare them there too to test them"]


def test_a_correct_engine_gets_no_warning() -> None:
    assert untestable(build_context(ToyEngine, name="toy")) == []
    assert untestable(build_context(TopK, name="T", options=SuiteOptions(reference=TopK))) == []


@pytest.mark.usefixtures("importable")
def test_the_header_says_it_before_any_check_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(toys=ENGINES)
    result = pytester.runpytest(*SUITE, "--engine", "toys:StopWithoutTokenizer", "-k",
                                "parity and not reference")
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    warned = [i for i, line in enumerate(lines) if line.startswith(WARNING)]
    started = [i for i, line in enumerate(lines) if "StopWithoutTokenizer-parity: started" in line]
    assert len(warned) == 1 and started and warned[0] < started[0], lines
    assert "but no tokenizer" in lines[warned[0]]


@pytest.mark.usefixtures("importable")
def test_a_fixture_engine_says_it_at_its_first_check_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(toys=ENGINES)
    pytester.makeconftest("""
        import pytest
        import toys

        @pytest.fixture
        def engine_factory():
            return toys.StopWithoutTokenizer
    """)
    pytester.makepyfile(test_suite="from engines.testing.conformance import *  # noqa: F403")
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev",
                                "--torch-threads=1", "-q", "-k", "parity or seeds")
    result.assert_outcomes(passed=2, skipped=1)
    assert sum(line.startswith(WARNING) for line in result.stdout.lines) == 1, result.stdout.str()


@pytest.mark.usefixtures("importable")
def test_an_xdist_worker_says_it_on_its_stderr(pytester: pytest.Pytester,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller builds no engine and a worker's header reaches no one: the worker says
    it, once, on its stderr (the controller's), as its first check starts."""
    pytester.makepyfile(toys=ENGINES)
    monkeypatch.setenv("PYTHONPATH", f"{pytester.path}:{ROOT}")
    result = pytester.runpytest_subprocess(*SUITE, "-n", "1", "--engine",
                                           "toys:StopWithoutTokenizer", "-k", "parity or seeds")
    result.assert_outcomes(passed=2, skipped=1)
    said = [line for line in result.stderr.lines if line.startswith(f"[gw0] {WARNING}")]
    assert len(said) == 1 and "but no tokenizer" in said[0], result.stderr.str()


@pytest.mark.usefixtures("importable")
def test_a_misspelt_declaration_stops_the_run_at_its_start(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(toys=ENGINES)
    result = pytester.runpytest(*SUITE, "--engine", "toys:Misspelt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the fields that declare it: 'stop', 'include_stop_str_in_output'" in \
        result.stderr.str()
