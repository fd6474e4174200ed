"""Measure the sampling_distribution check's false-alarm rate on correct engines: its seed
workload (engines.testing.features.unseeded_draws: two groups of unseeded one-token draws)
served RUNS times on each engine, every run with fresh randomness, each group tested against
the reference's distribution (engines.testing.distribution.tv_test); prints alarms, the largest
and the mean binned TV, and how many groups passed 0.15 and 0.20 (the threshold is 0.25).

    PYTHONPATH=. python scripts/unseeded_false_alarms.py 300 engines.paged:PagedEngine ...

A whole run costs an engine 320 requests; `sampler` in place of an engine spec runs the test
body many times more cheaply: the draws of our engines' shared sampler
(engines.core.sampling.sample, unseeded generators, one batch of 320 rows) from the
reference's logits at the two prompts, RUNS times.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from engines.core.sampling import make_generator, sample
from engines.factories import load_factory
from engines.protocol import Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.testing.context import SuiteOptions, build_context
from engines.testing.distribution import THRESHOLD, tempered, tv_test
from engines.testing.features.unseeded_draws import distribution_workload
from engines.testing.recorder import run_workload
from engines.testing.search import drawing_of

Key = tuple[tuple[int, ...], float]


def reference_tops(ctx: Any, w: Any) -> dict[Key, Mapping[int, float]]:
    """The reference's whole first-token distribution (logprobs) at each group's prompt."""
    tops: dict[Key, Mapping[int, float]] = {}
    for r in w.requests:
        key = (r.prompt_token_ids, r.params.temperature)
        if key not in tops:
            top = ctx.judge.reference(key[0], SamplingParams(max_tokens=1,
                                                             logprobs=ctx.limits.vocab_size))
            assert top.top_logprobs is not None
            tops[key] = top.top_logprobs[0]
    return tops


def tempered_probs(tops: dict[Key, Mapping[int, float]]) -> dict[Key, Any]:
    """Each group's distribution at its own temperature."""
    probs = {}
    for key, top in tops.items():
        found = tempered(top, key[1])
        assert found is not None
        probs[key] = found
    return probs


def report(name: str, runs: int, tvs: list[float]) -> None:
    alarms = sum(tv > THRESHOLD for tv in tvs)
    print(f"{name}: {runs} runs, {len(tvs)} groups, {alarms} alarms; binned TV max "
          f"{max(tvs):.3f}, mean {statistics.fmean(tvs):.3f}; over 0.15: "
          f"{sum(tv > 0.15 for tv in tvs)}, over 0.20: {sum(tv > 0.20 for tv in tvs)}",
          flush=True)


def measure(spec: str, runs: int) -> None:
    ctx = build_context(load_factory(spec), name=spec, spec=spec,
                        options=SuiteOptions(reference=SequentialEngine))
    assert ctx.judge.reference is not None
    w = distribution_workload(drawing_of(ctx, "sampling_distribution"))
    probs = tempered_probs(reference_tops(ctx, w))
    engine = ctx.pool.fresh()
    tvs: list[float] = []
    for _ in range(runs):
        trace = run_workload(engine, w)
        draws: dict[tuple[tuple[int, ...], float], list[int]] = defaultdict(list)
        for r in w.requests:
            draws[(r.prompt_token_ids, r.params.temperature)].append(
                trace.tokens(r.request_id)[0])
        tvs += [tv_test(d, probs[k]).tv for k, d in draws.items()]
    report(spec, runs, tvs)


class _Row:
    """What the sampler reads of a request's state."""

    def __init__(self, request: Request) -> None:
        self.request, self.output = request, list[int]()
        self.generator = make_generator(None, torch.device("cpu"))


def measure_sampler(runs: int) -> None:
    ctx = build_context(SequentialEngine, name="sampler",
                        options=SuiteOptions(reference=SequentialEngine))
    assert ctx.judge.reference is not None
    w = distribution_workload(drawing_of(ctx, "sampling_distribution"))
    tops = reference_tops(ctx, w)
    probs = tempered_probs(tops)
    logits = {}
    for key, top in tops.items():
        row = torch.full((ctx.limits.vocab_size,), float("-inf"))
        for t, v in top.items():
            row[t] = v
        logits[key] = row
    keys = [(r.prompt_token_ids, r.params.temperature) for r in w.requests]
    batch = torch.stack([logits[k] for k in keys])
    tvs: list[float] = []
    for _ in range(runs):
        rows: list[Any] = [_Row(r) for r in w.requests]
        tokens = sample(batch, rows)[0]
        draws: dict[tuple[tuple[int, ...], float], list[int]] = defaultdict(list)
        for k, t in zip(keys, tokens, strict=True):
            draws[k].append(t)
        tvs += [tv_test(d, probs[k]).tv for k, d in draws.items()]
    report("sampler", runs, tvs)


if __name__ == "__main__":
    n = int(sys.argv[1])
    for name in sys.argv[2:]:
        if name == "sampler":
            measure_sampler(n)
        else:
            measure(name, n)
