"""engines.testing.routing: with a reference that names an independent twin, a request that
uses a feature beyond the base fields is served alone by the twin, a plain one by the
reference itself; counted per feature; off, explicit and twin-less references."""

from __future__ import annotations

import dataclasses

import pytest

from engines.factories import EngineSpecError
from engines.independent import IndependentEngine, independent_reference
from engines.protocol import SamplingParams, capabilities_of
from engines.sequential import ProcessedSequentialEngine, SequentialEngine
from engines.testing.context import SuiteContext, SuiteOptions, build_context
from engines.testing.oracle import AloneOracle
from engines.testing.routing import RoutedOracle, features_of, lines

PROMPT = (5, 17, 300, 42)
SPEC = "engines.sequential:SequentialEngine"


class NoBadWords(IndependentEngine):
    """An independent reference that does not declare bad_words."""

    CAPABILITIES = dataclasses.replace(
        IndependentEngine.CAPABILITIES,
        supported_sampling=IndependentEngine.CAPABILITIES.supported_sampling - {"bad_words"})


def _context(**options: object) -> SuiteContext:
    return build_context(SequentialEngine, name="seq", options=SuiteOptions(
        reference=SequentialEngine, reference_spec=SPEC, **options))  # type: ignore[arg-type]


def _routed(ctx: SuiteContext) -> RoutedOracle:
    assert isinstance(ctx.judge.reference, RoutedOracle), ctx.judge.reference
    return ctx.judge.reference


def test_features_are_what_a_request_sets_beyond_the_base_fields() -> None:
    assert features_of(SamplingParams(max_tokens=3, temperature=1.0, seed=2, logprobs=5,
                                      stop_token_ids=(4,)), None) == frozenset()
    assert features_of(SamplingParams(bad_words=((1, 2),), n=2), None) == {"bad_words", "n"}
    assert features_of(SamplingParams(), "/adapters/a") == {"lora"}


def test_a_plain_request_goes_to_the_reference_and_a_bad_word_to_its_twin() -> None:
    ctx = _context()
    routed = _routed(ctx)
    greedy = routed(PROMPT, SamplingParams(max_tokens=6)).tokens
    assert routed.counts == {"given: plain": 1}
    assert len(routed.pools) == 1, "the twin is built at the first request routed to it"
    routed.top_at(PROMPT)  # the top candidates at a context: plain
    banned = SamplingParams(max_tokens=6, bad_words=(greedy[1:3],))
    got = routed(PROMPT, banned).tokens
    assert routed.counts == {"given: plain": 2, "independent: bad_words": 1}
    assert len(routed.pools) == 2
    assert got != greedy and got == ctx.oracle(PROMPT, banned).tokens  # the references agree
    routed(PROMPT, banned)  # answered from the cache: served once, counted once
    assert routed.counts["independent: bad_words"] == 1
    assert ctx.routing is not None and "IndependentEngine" in ctx.routing
    assert lines(routed.counts) == [
        "reference: requests served alone by the independent reference, by feature: "
        "bad_words 1; by the reference engine: plain 2"]
    ctx.close()


def test_what_the_twin_does_not_declare_falls_back_and_is_counted() -> None:
    ctx = _context(independent="tests.testing.test_routing:NoBadWords",
                   independent_factory=NoBadWords)
    routed = _routed(ctx)
    routed(PROMPT, SamplingParams(max_tokens=4, bad_words=((7, 8),), min_tokens=2))
    routed(PROMPT, SamplingParams(max_tokens=4, min_tokens=2))
    assert routed.counts == {"fallback: bad_words": 1, "fallback: min_tokens": 1,
                             "independent: min_tokens": 1}
    assert any("not servable by the independent reference" in line and "bad_words 1" in line
               for line in lines(routed.counts))


def test_off_leaves_the_reference_to_judge_every_feature() -> None:
    ctx = _context(independent="off")
    assert type(ctx.judge.reference) is AloneOracle
    assert ctx.routing is not None and "--independent-reference off" in ctx.routing


def test_a_reference_without_a_twin_judges_every_feature_and_the_header_says_so() -> None:
    for reference in (independent_reference, ProcessedSequentialEngine):
        ctx = build_context(SequentialEngine, name="seq",
                            options=SuiteOptions(reference=reference))
        assert type(ctx.judge.reference) is AloneOracle
        assert ctx.routing is not None and "names no independent twin" in ctx.routing


def test_an_independent_reference_needs_a_reference_engine() -> None:
    with pytest.raises(EngineSpecError, match="needs a reference engine"):
        build_context(SequentialEngine, options=SuiteOptions(
            independent="engines.independent:independent_reference",
            independent_factory=independent_reference))


def test_the_bf16_reference_names_a_bf16_twin() -> None:
    twin = SequentialEngine(dtype="bfloat16").independent_twin()
    assert twin is not None
    built = twin()
    assert isinstance(built, IndependentEngine)
    assert capabilities_of(built).dtype == "bfloat16"


SUITE = ("-p", "no:cacheprovider", "--hypothesis-profile=batching-dev", "--pyargs",
         "engines.testing.conformance", "--engine", "examples.toy_engine:ToyEngine")


def test_the_option_and_the_header(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*SUITE, "--reference-engine", "examples.toy_engine:ToyEngine",
                                "-k", "liveness")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["batching-engines: reference engine examples.toy_engine:"
                                 "ToyEngine for every feature (it names no independent twin*"])
    result = pytester.runpytest(*SUITE, "--reference-engine", "examples.toy_engine:ToyEngine",
                                "--independent-reference", "sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'sometimes' is not auto, off or MODULE:CALLABLE*"])
    result = pytester.runpytest(*SUITE, "--independent-reference",
                                "engines.independent:independent_reference")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*needs --reference-engine*"])
