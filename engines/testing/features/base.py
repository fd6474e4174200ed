"""What every feature shares: the `Feature` (one request feature the suite draws: what an
engine must declare for it, and the hooks through which it adds to drawn workloads and seed
workloads), a check's `Use` of one, and the `Drawing` a check's workloads are drawn from (the
engine's limits plus the features drawn, each as the check set it).

A feature's hooks are called at fixed points of a draw, in the registry's order
(engines.testing.features.FEATURES):

- `params`: each drawn request's params, after its logits processing and before its stop ids
  (constraints: what a mask or a bias changes is worth drawing from the request's own tokens);
- `stops`: each drawn request's params, after its stop ids (stop strings, from its own text);
- `mix`: the whole request mix (tenants: each request under an adapter or a salt);
- `extra`: requests added to a workload after the mix (seed groups, n > 1 families, beams);
- `seeds`: the feature's hand-picked seed workloads, run before any search.

Features compose: a feature's `extra` requests (an n > 1 family) pass, drawn request by
request, through the `params` and `stops` hooks of the features named in its `composes`
(stop strings drawn from one child's text), where those are drawn too
(engines.testing.composition).

A hook is only called where the Drawing draws its feature: every engine compared declares what
it needs, and the feature is drawn everywhere (`everywhere`) or the check names it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["AloneFn", "Drawing", "Feature", "Make", "Use", "prompts", "pseudo_tokens",
           "short_and_long"]

# Serves (prompt, params) alone and returns the generated token ids (AloneOracle.tokens).
AloneFn = Callable[[Sequence[int], SamplingParams], Sequence[int]]
# A seed workload's request maker: req(index, prompt, max_tokens, **params) -> Request r<index>.
Make = Callable[..., Request]


def pseudo_tokens(seed: int, n: int, vocab_size: int) -> tuple[int, ...]:
    """n token ids from a seed: long prompts cost one draw, and shrink with their seed."""
    rng = random.Random(seed)
    return tuple(rng.randrange(vocab_size) for _ in range(n))


def prompts(
    limits: EngineLimits, *, max_len: int | None = None
) -> st.SearchStrategy[tuple[int, ...]]:
    """Token-id prompts of length 1..max_len (default: the short cap)."""
    cap = max(1, min(max_len or limits.short_prompt, limits.max_model_len - 1))
    tok = st.integers(0, limits.vocab_size - 1)
    return st.lists(tok, min_size=1, max_size=cap).map(tuple)


def short_and_long(limits: EngineLimits, req: Make) -> list[Request]:
    """A seed workload's four requests: short prompts of uneven budgets around one long prompt
    (48 tokens, or what the context leaves), the first and last prompts alike."""
    budget = max(1, min(limits.max_tokens, 4))
    long_len = max(1, min(limits.max_model_len - budget, 48))
    v = limits.vocab_size
    return [req(0, [1, 2, 3], 4), req(1, [(5 * j + 3) % v for j in range(long_len)], 3),
            req(2, [4], 2), req(3, [1, 2, 3], 4)]


@dataclass(frozen=True, slots=True)
class Drawing(EngineLimits):
    """One check's draw plan: the engine's limits (every field of EngineLimits), the names of
    the features its workloads carry, and the settings those features gave it. Built by
    engines.testing.features.drawing_for from the check's Uses; a draw function reads the
    limits and the settings from it alike."""

    features: frozenset[str] = frozenset()  # names of the features drawn
    prompt_logprobs: int = 0  # prompt candidates every drawn request asks for (0: none)
    # Filters (top_k, min_p, top_p) at values that leave only the most likely token, drawn in
    # unseeded sampled requests: every engine compared declares them and temperature.
    greedy_filters: tuple[str, ...] = ()
    unseeded_draws: int = 0  # unseeded draws per group of the distribution workload
    sequence_draws: int = 0  # unseeded sampled sequences of the sequence workload
    constraints_dense: bool = False  # constraints on two drawn requests in three, not one
    bad: tuple[int, int] = (0, 1)  # bad requests per drawn workload, fewest and most
    bad_seed_workloads: bool = False  # the seed workloads are the bad-input ones
    beam_width: int = 4  # the widest beam search drawn (below 2: none)

    def draws(self, feature: Feature) -> bool:
        return feature.name in self.features

    @classmethod
    def from_limits(cls, limits: EngineLimits, **settings: object) -> Drawing:
        """A Drawing of these limits (an EngineLimits, or a Drawing whose settings are
        replaced) with `settings`."""
        fields = {f.name: getattr(limits, f.name) for f in dataclasses.fields(limits)}
        return cls(**{**fields, **settings})  # type: ignore[arg-type]


ParamsHook = Callable[[Drawing, Sequence[int], SamplingParams, AloneFn | None],
                      st.SearchStrategy[SamplingParams]]
StopsHook = Callable[[Drawing, Sequence[int], Sequence[int], SamplingParams],
                     st.SearchStrategy[SamplingParams]]
MixHook = Callable[[Drawing, list[Request], int | None], st.SearchStrategy[list[Request]]]
ExtraHook = Callable[[Drawing, int], st.SearchStrategy[list[Request]]]
SeedsHook = Callable[[Drawing, Make, AloneFn | None], list[Workload]]
# The Drawing fields a check's use of the feature sets, from the use's setting and the limits.
Configure = Callable[[EngineLimits, int], Mapping[str, object]]


@dataclass(frozen=True, slots=True)
class Use:
    """A check's use of a feature: the feature's name, and its setting (a count, a density:
    what the feature's `configure` reads; 1 where it has none)."""

    feature: str
    setting: int = 1


@dataclass(frozen=True, slots=True)
class Feature:
    """One request feature the suite draws (tenants, constraints, stop strings, children,
    beams, drafts, unseeded sampling, ...): its name (the file's under features/), what every
    engine compared must declare for it (`needs`, in words, and `declared`, the test), whether
    every check's workloads carry it or only those of the checks that use it, and its hooks
    (module docstring)."""

    name: str
    needs: str
    declared: Callable[[EngineLimits], bool]
    everywhere: bool = False
    configure: Configure | None = None
    params: ParamsHook | None = None
    stops: StopsHook | None = None
    mix: MixHook | None = None
    extra: ExtraHook | None = None
    seeds: SeedsHook | None = None
    # The features whose per-request hooks (params, stops) this feature's extra requests may
    # be drawn with: those the feature's requests can carry on every engine that declares both.
    composes: frozenset[str] = frozenset()

    def use(self, setting: int = 1) -> Use:
        return Use(self.name, setting)
