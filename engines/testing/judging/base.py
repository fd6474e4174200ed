"""What every property shares: Violation, the Judge (what a trace is compared against), and
the sentence pieces that name a request, a step and a token."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from engines.protocol import Request, SamplingParams
from engines.testing.judging.processed import (
    FILTERS,
    Forced,
    fields_of,
    filters_hold,
    judge_forced,
    judged_forced,
)
from engines.testing.oracle import (
    TOP_K,
    AloneOracle,
    Divergence,
    ParityMode,
    TopAt,
    first_divergence,
)
from engines.testing.recorder import Trace
from engines.testing.workload import Workload

__all__ = ["Judge", "Violation", "describe", "step_of_token", "tops"]

# Serves a workload on a config variant's engine and returns its trace.
VariantRunner = Callable[[Workload], Trace]


class Violation(AssertionError):
    """A property failed; str() is the whole explanation, starting with the check's name
    (`prop`). Properties raise them through their check: `check.fail(text)`."""

    # The config variant (--engine-variant) whose run failed, where one did: the report's
    # script then builds that variant beside the main engine (engines.testing.replays).
    variant: str | None = None

    def __init__(self, prop: str, message: str) -> None:
        super().__init__(message)
        self.prop = prop


@dataclass(frozen=True, slots=True)
class Judge:
    """What properties compare a trace against: requests served alone on the same factory,
    optionally on a reference factory, and the same workload on config variants."""

    oracle: AloneOracle
    parity: ParityMode = "exact"
    tolerance: float = 1e-3
    reference: AloneOracle | None = None
    variants: Mapping[str, VariantRunner] = field(default_factory=dict)
    # The variants with KVIntrospection, each with the source lines that build it (for a
    # report about its KV view): kv_accounting judges their runs of each workload too.
    kv_variants: Mapping[str, str] = field(default_factory=dict)
    # The checks the engine under test declares broken (expected_failed_checks): a check that
    # re-judges another one's property as part of its own (bad_input re-checks parity on the
    # good requests) leaves a declared one to its strict xfail, and says so.
    declared: frozenset[str] = frozenset()
    # What the engine's and the reference engine's top logprobs are of (engines.protocol's
    # logprobs_of: "raw" or "processed"): values of different kinds are compared only where
    # the request's processing is the identity (engines.testing.processing).
    logprobs_of: str = "raw"
    reference_logprobs_of: str = "raw"
    # The engines' vocabulary (0: unknown): how many candidates make a whole distribution.
    vocab_size: int = 0
    # Tie-aware: a logprob value's tolerance grows by this much per unit of the value
    # (engines.testing.precision.relative_for).
    relative: float = 0.0
    # How a divergence from the reference is judged under tie-aware parity: "near-tie" (the
    # near-tie rule), or "top-k" (a quantized engine against a reference that is not:
    # engines.testing.precision).
    reference_rule: str = "near-tie"
    # The parity of comparisons against the reference where it is not `parity` (None: it
    # is): an engine that declares batch invariance is exact against itself and tie-aware
    # against a reference that does not (engines.testing.precision). Tie-aware against the
    # reference, a logprob value's tolerance: the sum of both sides' own parts (absolute, per
    # unit of the value; 0: two parts of `tolerance` and `relative`, both sides at one
    # precision).
    reference_parity: ParityMode | None = None
    reference_value: float = 0.0
    reference_relative: float = 0.0

    def versus_reference(self) -> Judge:
        """The judge of comparisons against the reference engine: this one, or this one at
        the reference's parity where that differs (an invariant engine, exact against itself,
        beside a reference that is not)."""
        mode = self.reference_parity or self.parity
        return self if mode == self.parity else dataclasses.replace(self, parity=mode)

    def comparable(self, params: SamplingParams) -> bool:
        """Whether a request's tokens are a function of the request, so that two runs must
        agree: greedy, or sampled under a seed. Not in tie-aware mode for sampled requests: a
        batch-variant kernel's perturbed logits may move a sampled token across a boundary of
        the sampling distribution, and no margin tells when (the `seeds` check still compares
        such requests served alone twice)."""
        if params.temperature == 0:
            return True
        return params.seed is not None and self.parity == "exact"

    def top_at(self, prompt: Sequence[int], tokens: Sequence[int]) -> TopAt | None:
        """Margins for tie-aware parity, from the reference engine (independent of the
        engine under test) at prompt + the tokens before the divergence; None without one."""
        reference = self.reference
        if reference is None or self.parity != "tie-aware":
            return None
        return lambda pos: reference.top_at((*prompt, *tokens[:pos]))

    def diverges(self, prompt: Sequence[int], observed: Sequence[int],
                 expected: Sequence[int], *, observed_top: Sequence[Mapping[int, float]] | None,
                 expected_top: Sequence[Mapping[int, float]] | None,
                 params: SamplingParams | None = None, forced: Forced | None = None,
                 reference: bool = False) -> str | None:
        """None if observed agrees with expected (or diverges at a forgiven near-tie), else
        where and how they diverge. A greedy request under logits processing (`params`) in
        tie-aware mode is judged by engines.testing.judging.processed from its first
        divergence on, counted into `forced`. `reference`: expected is the reference
        engine's, judged at the reference's parity (versus_reference) and by top-k
        membership where the judge's reference_rule says so."""
        versus = self.versus_reference() if reference else self
        if versus is not self:
            return versus.diverges(prompt, observed, expected, observed_top=observed_top,
                                   expected_top=expected_top, params=params, forced=forced,
                                   reference=True)
        top_k = self.top_k if reference else 0
        if params is not None and judged_forced(params, self.parity == "tie-aware"):
            return self._forced(prompt, params, observed, expected, forced or Forced(), top_k)
        d = first_divergence(observed, expected, observed_top=observed_top,
                             expected_top=expected_top, top_at=self.top_at(prompt, observed),
                             mode=self.parity, tolerance=self.tolerance)
        if d is not None and d.accepted and forced is not None:
            forced.ties += 1
        if d is not None and not d.accepted and top_k:
            return self._in_top(prompt, observed, observed_top, d, forced or Forced(), top_k)
        return None if d is None or d.accepted else d.describe()

    @property
    def top_k(self) -> int:
        """Candidates a token must be among where a divergence from the reference is judged
        by top-k membership (0: it is not)."""
        on = (self.reference_rule == "top-k" and self.parity == "tie-aware"
              and self.reference is not None)
        return TOP_K if on else 0

    def _in_top(self, prompt: Sequence[int], observed: Sequence[int],
                observed_top: Sequence[Mapping[int, float]] | None, d: Divergence,
                forced: Forced, k: int) -> str | None:
        """check_logprobs_close's rule at a greedy divergence from the reference: the engine's
        token among the reference's k most likely at the shared context, and the reference's
        among the engine's own top candidates there where it reports them. The comparison of
        the request ends at the divergence (after it the contexts differ)."""
        reference = self.reference
        if reference is None or d.observed is None or d.expected is None:
            return d.describe()  # one run ended early: no quantization explains that
        theirs = reference.top_at((*prompt, *observed[:d.position])) or {}
        mine = observed_top[d.position] if observed_top and d.position < len(observed_top) \
            else None
        if d.observed not in _best(theirs, k):
            return (f"at generated position {d.position}: reference gave {d.expected}, "
                    f"batched gave {d.observed}, which is not among the reference's {k} most "
                    f"likely there ({_listed(theirs, k)})")
        if mine is not None and d.expected not in mine:
            return (f"at generated position {d.position}: reference gave {d.expected}, "
                    f"batched gave {d.observed}; the reference's token is not among the "
                    f"engine's own top candidates there ({_listed(mine, k)})")
        forced.in_top += 1
        return None

    def filtered(self, prompt: Sequence[int], params: SamplingParams,
                 observed: Sequence[int], forced: Forced) -> str | None:
        """Under tie-aware parity with a reference, a sampled request with a filter (top_k,
        top_p, min_p): where one of its tokens is one the filters forbid at the engine's
        context (engines.testing.judging.processed.filters_hold), else None. Its tokens are
        not compared with another run's there (a near-tie may move a draw), but what a filter
        forbids is forbidden at any precision."""
        if (self.parity != "tie-aware" or self.reference is None or params.temperature == 0
                or not any(n in fields_of(params) for n in FILTERS)):
            return None
        return filters_hold(self.reference, prompt, params, observed, tolerance=self.tolerance,
                            vocab=self.vocab_size, counts=forced,
                            kind=self.reference_logprobs_of)

    def _forced(self, prompt: Sequence[int], params: SamplingParams, observed: Sequence[int],
                expected: Sequence[int], forced: Forced, top_k: int = 0) -> str | None:
        at = next((i for i, (a, b) in enumerate(zip(observed, expected, strict=False))
                   if a != b), min(len(observed), len(expected)))
        for _ in range(at):  # the same context as the run compared: equal tokens judged
            forced.count(params, forced.judged)
        if at == len(observed) == len(expected):
            return None
        if self.reference is None:  # no whole distribution to judge the gap with
            forced.count(params, forced.unjudged)
            return None
        if at == len(observed):
            return (f"at generated position {at}: the run compared gave {expected[at]}, this "
                    "run ended")
        return judge_forced(self.reference, prompt, params, observed, at,
                            tolerance=self.tolerance, vocab=self.vocab_size, counts=forced,
                            kind=self.reference_logprobs_of, top_k=top_k)


def _best(cands: Mapping[int, float], k: int) -> set[int]:
    """The k most likely of `cands`, and any tied with the k-th."""
    values = sorted(cands.values(), reverse=True)
    if not values:
        return set()
    floor = values[min(k, len(values)) - 1]
    return {t for t, v in cands.items() if v >= floor}


def _listed(cands: Mapping[int, float], k: int) -> str:
    best = sorted(cands.items(), key=lambda tv: -tv[1])[:k]
    return ", ".join(f"{t}: {v:.3g}" for t, v in best) or "none reported"


def describe(r: Request, trace: Trace) -> str:
    i = trace.workload.requests.index(r)
    p = r.params
    return (
        f"request {r.request_id!r} (arrived before step {trace.workload.arrivals[i]}, "
        f"prompt of {len(r.prompt_token_ids)} tokens, max_tokens {p.max_tokens}"
        + (f", stop_token_ids {p.stop_token_ids}" if p.stop_token_ids else "")
        + (f", temperature {p.temperature} seed {p.seed}" if p.temperature else "")
        + ")"
    )


def step_of_token(trace: Trace, rid: Hashable, pos: int) -> int | None:
    seen = 0
    for step, out in trace.outputs.get(rid, []):
        seen += len(out.token_ids)
        if seen > pos:
            return step
    return None


def tops(trace: Trace, rid: Hashable) -> list[Mapping[int, float]] | None:
    """The request's top_logprobs, one per token, or None if any output lacked them."""
    found: list[Mapping[int, float]] = []
    for _, out in trace.outputs.get(rid, []):
        if out.token_ids and out.top_logprobs is None:
            return None
        found.extend(out.top_logprobs or ())
    return found
