"""The plugin's ways in and its error messages, run as a user would (pytester, in-process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])
SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance")


@pytest.fixture(autouse=True)
def importable_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(ROOT)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def test_engine_option_runs_the_suite_with_readable_ids(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine", "-v")
    # reference_parity, low_temperature, sampling_distribution, sequence_distribution: no
    # reference;
    # variants: none given;
    # kv_accounting, isolation: no KV view; drain: no load view; prompt_logprobs, children,
    # greedy_filters, constraints, beam_search: not declared; streamed_text, stop_strings: no
    # tokenizer
    result.assert_outcomes(passed=13, skipped=15)
    result.stdout.fnmatch_lines([
        "batching-engines: engine examples.toy_engine:ToyEngine, parity exact (auto: every "
        "engine compared computes float32 with a float32 KV cache), *",
        "*test_conformance[[]ToyEngine-parity[]] PASSED*",
        "*test_conformance[[]ToyEngine-stateful[]] PASSED*",
    ])


def test_ini_key_and_tie_aware_mode(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nengine = examples.toy_engine:ToyEngine\nparity = tie-aware\n")
    result = pytester.runpytest(*SUITE, "-k", "parity")
    result.assert_outcomes(passed=1, skipped=1)  # reference_parity: no reference given
    result.stdout.fnmatch_lines(["*parity tie-aware, tolerance 0.001 (--parity=tie-aware; "
                                 "tolerance from the declarations: engine declares float32; "
                                 "margins from the engine's own logprobs)*"])


def test_auto_parity_on_a_real_bf16_engine(pytester: pytest.Pytester) -> None:
    # The suite under its default --parity=auto on the continuous engine in bf16: the engine
    # declares bfloat16, so the checks compare tie-aware at 2 bf16 ulps, every property that
    # asks for top_logprobs gets them from a real engine, and no near-tie is called a bug.
    # The reference runs in bf16 too: against fp32's, bf16's rounding alone moves a token.
    result = pytester.runpytest(*SUITE, "--engine", "engines.slot.continuous:continuous_bf16",
                                "--reference-engine", "engines.sequential:sequential_bf16",
                                "-k", "parity or prefill_decode or seeds or stateful")
    result.assert_outcomes(passed=5)  # the checks that compare tokens
    result.stdout.fnmatch_lines([
        "*parity tie-aware, tolerance 0.125, logprob values against the reference within *, "
        "the two sides' own errors summed (auto: engine declares bfloat16; margins from the "
        "reference engine)*",
        "parity: tie-aware, tolerance 0.125, logprob values against the reference within *"
        "(auto: engine declares bfloat16)"])
    # The suite's own warning line (pytest's warnings summary depends on the environment).
    assert "batching-engines: warning" not in result.stdout.str()


def test_a_reference_at_another_precision_is_a_header_warning(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "engines.slot.continuous:continuous_bf16",
                                "--reference-engine", "engines.sequential:SequentialEngine",
                                "-k", "liveness")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*parity tie-aware, tolerance 0.125, * (auto: engine declares bfloat16;*",
        "batching-engines: warning: the reference engine computes in float32, the engine in "
        "bfloat16: *engines.sequential:sequential_bf16*"])


def test_fixture_override_pulls_the_suite_in(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\nfrom examples.toy_engine import ToyEngine\n\n"
        "@pytest.fixture\ndef engine_factory():\n    return ToyEngine\n"
    )
    pytester.makepyfile(test_mine="from engines.testing.conformance import *  # noqa: F403\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev")
    # reference_parity, low_temperature, sampling_distribution, sequence_distribution: no
    # reference;
    # variants: none given;
    # kv_accounting, isolation: no KV view; drain: no load view; prompt_logprobs, children,
    # greedy_filters, constraints, beam_search: not declared; streamed_text, stop_strings: no
    # tokenizer
    result.assert_outcomes(passed=13, skipped=15)


def test_declared_expected_failures_are_strict_xfails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(bugs="""
        from engines.protocol import Capabilities
        from examples.toy_engine import ToyEngine
        from tests.planted.toy_bugs import OneAdmissionPerStep

        class Declared(OneAdmissionPerStep):
            def capabilities(self):
                return Capabilities(expected_failed_checks={
                    "work_conservation": "admits one request per step"})

        class Stale(ToyEngine):  # declares a failure it does not have
            def capabilities(self):
                return Capabilities(expected_failed_checks={
                    "zero_waste": "we thought it wasted slots"})
    """)
    result = pytester.runpytest(*SUITE, "--engine", "bugs:Declared", "-k", "work_conservation")
    result.assert_outcomes(xfailed=1)
    result = pytester.runpytest(*SUITE, "--engine", "bugs:Stale", "-k", "zero_waste")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*we thought it wasted slots*"])


def test_an_engine_that_declares_seeds_unsupported(pytester: pytest.Pytester) -> None:
    # It refuses seeded sampling, as the vLLM adapter does under a prefill budget: the other
    # checks draw no sampled request (they pass), the `seeds` check still does (a strict xfail).
    pytester.makepyfile(noseeds="""
        from engines.protocol import Capabilities, InvalidRequest
        from examples.toy_engine import ToyEngine

        class NoSeeds(ToyEngine):
            def capabilities(self):
                return Capabilities(expected_failed_checks={"seeds": "refuses seeded sampling"})

            def add_request(self, request):
                if request.params.temperature > 0:
                    raise InvalidRequest(f"temperature: {request.params.temperature}")
                super().add_request(request)
    """)
    result = pytester.runpytest(*SUITE, "--engine", "noseeds:NoSeeds", "-rxX")
    result.assert_outcomes(passed=12, skipped=15, xfailed=1)
    result.stdout.fnmatch_lines(["*NoSeeds-seeds*refuses seeded sampling*"])


def test_no_engine_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no engine to test. Pass --engine module:callable*"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module:make", "*importing module 'no_such_module' failed with "
         "ModuleNotFoundError*"),
        ("examples.toy_engine:Nope", "*module 'examples.toy_engine' has no attribute 'Nope'*"),
        ("examples.toy_engine", "*expected 'module:callable'*"),
        ("engines.protocol:SamplingParams", "*returned engines.protocol.SamplingParams, which is "
         "not an engine: it lacks add_request, step, has_work, vocab_size, max_model_len*"),
    ],
)
def test_bad_engine_spec_is_a_usage_error(pytester: pytest.Pytester, spec: str,
                                          message: str) -> None:
    result = pytester.runpytest(*SUITE, "--engine", spec)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_engine_missing_one_member_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(half="""
        from examples.toy_engine import ToyEngine

        class NoHasWork(ToyEngine):
            has_work = None
    """)
    result = pytester.runpytest(*SUITE, "--engine", "half:NoHasWork")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*which is not an engine: it lacks has_work (*"])


def test_variants_and_their_failures_through_the_command_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine",
                                "--engine-variant", "one_slot=examples.toy_engine:one_slot",
                                "-k", "variants")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["batching-engines: variants one_slot=examples.toy_*"])
    result = pytester.runpytest(*SUITE, "--engine",
                                "tests.planted.edge_bugs:ChunkBoundaryOffByOne",
                                "--engine-variant", "chunk4=tests.planted.edge_bugs:chunked4",
                                "-k", "variants or parity")
    result.assert_outcomes(failed=1, passed=1, skipped=1)  # parity passes; no reference
    result.stdout.fnmatch_lines(["*variants: request * on variant 'chunk4' but * on the main "
                                 "engine*"])


def test_reference_engine_through_the_command_line(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "tests.planted.model_bugs:DropsQKVBias",
                                "--reference-engine", "engines.sequential:SequentialEngine",
                                "-k", "parity")
    result.assert_outcomes(failed=1, passed=1)  # self-parity cannot see a dropped bias
    result.stdout.fnmatch_lines(["*reference_parity: request * diverged from the reference*"])


@pytest.mark.parametrize(("args", "message"), [
    (("--reference-engine", "examples.toy_engine"), "*--reference-engine 'examples.toy_engine':"
     " expected 'module:callable'*"),
    (("--engine-variant", "examples.toy_engine:one_slot"), "*--engine-variant "
     "'examples.toy_engine:one_slot': expected NAME=MODULE:CALLABLE*"),
    (("--reference-engine", "engines.sequential:SequentialEngine"), "*reference engine has "
     "vocab_size 1024 but the engine under test has 512*"),
])
def test_bad_reference_or_variant_is_a_usage_error(pytester: pytest.Pytester,
                                                   args: tuple[str, str], message: str) -> None:
    result = pytester.runpytest(*SUITE, "--engine", "examples.toy_engine:ToyEngine", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
