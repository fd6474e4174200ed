"""Sampled speculation (the min(1, p/q) rule, engines.paged.spec_sampling) and the check that
judges it (sequence_distribution): the rule's tokens follow p; the planted residual and
acceptance bugs' do not, and the check says so on the engine; the correct sampled-draft
engine passes it.

The engine runs are made reproducible by seeding the requests: the check judges unseeded
requests only, so each trace is judged as the unseeded workload it copies (same ids, same
tokens); a test then fails or passes the same way every time."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from engines.paged.spec_sampling import inverse_cdf, uniform
from engines.paged.speculate import SpeculativeSteps
from engines.paged.variants import speculative_draft_sampled
from engines.protocol import Request
from engines.sequential import SequentialEngine
from engines.testing.checks import check_named
from engines.testing.checks.sequence_distribution import check_sequence_distribution
from engines.testing.context import SuiteOptions, build_context
from engines.testing.features.sequence_draws import sequence_workload
from engines.testing.judging import Violation
from engines.testing.recorder import run_workload
from engines.testing.search import drawing_of
from tests.planted.spec_bugs import AcceptsWithProbabilityP, ResidualNotNormalised

DRAWS = 20_000


class _Seq:
    """What the rule reads of a request: its generator."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)


def _emitted(rule: Any, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    seq = _Seq(7)
    counts = torch.zeros_like(p, dtype=torch.float64)
    for _ in range(DRAWS):
        draft = inverse_cdf(q, uniform(seq))  # type: ignore[arg-type]
        counts[rule._speculative_token(seq, p, q, draft)] += 1
    return counts / DRAWS


def _pq() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return (torch.softmax(torch.randn(12, generator=g) * 1.5, 0),
            torch.softmax(torch.randn(12, generator=g) * 1.5, 0))


def test_the_rule_emits_tokens_that_follow_p() -> None:
    p, q = _pq()
    got = _emitted(SpeculativeSteps(), p, q)
    tv = 0.5 * float((got - p.double()).abs().sum())
    assert tv < 0.02, (tv, got, p)  # 20,000 draws: a correct rule is ~0.01 off


@pytest.mark.parametrize("planted", [ResidualNotNormalised, AcceptsWithProbabilityP],
                         ids=lambda bug: bug.__name__)
def test_the_planted_rule_bugs_do_not(planted: Any) -> None:
    p, q = _pq()
    method = "_residual" if planted is ResidualNotNormalised else "_speculative_token"
    bug = type("Bug", (SpeculativeSteps,), {method: getattr(planted, method)})()
    got = _emitted(bug, p, q)
    assert 0.5 * float((got - p.double()).abs().sum()) > 0.1


def _judge(factory: Any) -> Violation | None:
    """factory's run of the check's seed workload, seeded request by request, judged."""
    ctx = build_context(factory, name="spec", options=SuiteOptions(reference=SequentialEngine))
    w = sequence_workload(drawing_of(ctx, "sequence_distribution"))
    seeded = dataclasses.replace(w, requests=tuple(
        Request(r.prompt_token_ids, dataclasses.replace(r.params, seed=100 + i),
                request_id=r.request_id) for i, r in enumerate(w.requests)))
    trace = run_workload(factory(), seeded)
    trace.workload = w  # judged as the unseeded workload: the same ids and tokens
    try:
        check_sequence_distribution(check_named("sequence_distribution"), trace, ctx.judge)
    except Violation as caught:
        return caught
    return None


@pytest.mark.parametrize("factory", [speculative_draft_sampled, ResidualNotNormalised,
                                     AcceptsWithProbabilityP],
                         ids=["speculative_draft_sampled", "ResidualNotNormalised",
                              "AcceptsWithProbabilityP"])
def test_the_sequence_check_on_sampled_drafts(factory: Any) -> None:
    caught = _judge(factory)
    if factory is not speculative_draft_sampled:
        assert caught is not None and "do not follow" in str(caught)
    else:
        assert caught is None, str(caught)
