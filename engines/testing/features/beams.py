"""Hypothesis draws of beam-search requests (beam_width > 1), for engines that declare
`beam_width` (every engine compared declaring it: the check needs it, and no other check
draws beams): greedy only, as beams are; widths 2..4; n up to the width where `n` is
declared; length penalties around generate's default (where `length_penalty` is declared);
half of them with many stop ids, so that beams end at different lengths and the length
normalisation decides between them, and those with min_tokens 0 or 1..budget where
`min_tokens` is declared and not refused on beams (beams with min_tokens, issue 51).

The seed workload (`beam_stop_workload`), from each prompt's best beam served alone without
stop ids: the same search with that beam's first token a stop id (the best candidate of the
first step ends its hypothesis), and with its third token one (the best beam ends there
while the others go on, every beam returned); where `min_tokens` is declared, also with its
first token a stop id under min_tokens 2 and length penalty 0 (that token alone would be the
best hypothesis: no beam may end on it before its third token). A
search in which a stop id does not end a hypothesis returns a beam holding it before its
end, or ending on it with LENGTH; one that ignores min_tokens, a beam ending on it early.
"""

from __future__ import annotations

from hypothesis import strategies as st

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["BEAM_STOPS", "FEATURE", "FIT_VARIANTS", "MAX_BEAM_WIDTH", "beam_requests",
           "beam_stop_workload", "beam_width_cap", "draws_beams"]

MAX_BEAM_WIDTH = 4  # widths drawn: 2 to this
# Tokens per beam at most: long enough for beams of different lengths to compete.
BEAM_BUDGET = 6
# Length penalties drawn: generate's default (1), off (0), longer favoured (2), shorter (-1).
LENGTH_PENALTIES = (1.0, 0.0, 2.0, -1.0, 0.5)
# Stop ids, where drawn: one id in this many (a candidate among the best ends often).
STOP_STRIDES = (8, 16)


def draws_beams(limits: EngineLimits) -> bool:
    """Whether beam requests may be drawn: every engine compared declares `beam_width`."""
    return "beam_width" in limits.sampling_fields


def _min_tokens(limits: EngineLimits) -> bool:
    """Whether beams may set min_tokens: every engine compared declares it, and none refuses
    it on beams (Capabilities.refused_with_beams)."""
    return "min_tokens" in limits.sampling_fields and "min_tokens" not in limits.refused_with_beams


@st.composite
def beam_requests(draw: st.DrawFn, limits: EngineLimits, start: int,
                  max_width: int = MAX_BEAM_WIDTH) -> list[Request]:
    """1..3 beam requests, of widths 2..max_width."""
    fields = limits.sampling_fields
    out = []
    for i in range(draw(st.integers(1, 3), label="beam requests")):
        cap = max(1, min(limits.short_prompt, limits.max_model_len - 2))
        prompt = tuple(draw(st.lists(st.integers(0, limits.vocab_size - 1), min_size=1,
                                     max_size=cap), label=f"beam{i}.prompt"))
        budget = draw(st.integers(1, max(1, min(BEAM_BUDGET, limits.max_model_len
                                                - len(prompt) - 1))), label=f"beam{i}.budget")
        width = draw(st.integers(2, max_width), label=f"beam{i}.width")
        n = draw(st.integers(1, width), label=f"beam{i}.n") if "n" in fields else 1
        penalty = (draw(st.sampled_from(LENGTH_PENALTIES), label=f"beam{i}.length_penalty")
                   if "length_penalty" in fields else 1.0)
        stride = draw(st.one_of(st.none(), st.sampled_from(STOP_STRIDES)),
                      label=f"beam{i}.stride")
        stops: tuple[int, ...] = ()
        if stride is not None:
            offset = draw(st.integers(0, stride - 1), label=f"beam{i}.stops")
            stops = tuple(range(offset, limits.vocab_size, stride))
        # min_tokens (where declared): its stop ids held back over the first tokens.
        least = (draw(st.one_of(st.just(0), st.integers(1, budget)), label=f"beam{i}.min_tokens")
                 if _min_tokens(limits) and stops else 0)
        params = SamplingParams(max_tokens=budget, beam_width=width, n=n, min_tokens=least,
                                length_penalty=penalty, stop_token_ids=stops)
        out.append(Request(prompt, params, request_id=f"r{start + i}"))
    return out


# The setting of a check that replays its workloads on every config variant with a KV view
# (kv_accounting): beam widths then stay within the seats of each (a variant refuses a search
# wider than its batch).
FIT_VARIANTS = 2


def beam_width_cap(limits: EngineLimits, fit_variants: bool) -> int:
    """The widest beam search a check may draw: within the seats of the engine and, where the
    check replays its workloads on the KV variants, of each of them (below 2: none)."""
    seats = [MAX_BEAM_WIDTH]
    if fit_variants:
        seats += [s for _, s in limits.variant_pools]
        if limits.max_batch_size:
            seats.append(limits.max_batch_size)
    return min(seats)


def _extra(drawing: Drawing, start: int) -> st.SearchStrategy[list[Request]]:
    if drawing.beam_width < 2:
        return st.just([])  # no width fits: said in the summary (search.BEAMS_UNFIT)
    return beam_requests(drawing, start, drawing.beam_width)


BEAM_STOPS = "beams ended by a stop id while others go on"
_STOP_PROMPTS = ((2, 7, 1, 8), (3, 3, 9))


def beam_stop_workload(limits: Drawing, alone: AloneFn) -> Workload | None:
    """Per prompt, two searches of the widest width drawn (3 at most) and budget BEAM_BUDGET:
    one whose stop id is its best beam's first token, one whose stop id is its best beam's
    third token (n = the width: every beam returned), beside a search without stop ids; and
    where `min_tokens` is declared, the first under min_tokens 2. None where no width fits or
    the context is too short."""
    width = min(limits.beam_width, 3)
    budget = min(BEAM_BUDGET, limits.max_model_len - 5)
    if width < 2 or budget < 4:
        return None
    n = width if "n" in limits.sampling_fields else 1
    reqs: list[Request] = []
    for raw in _STOP_PROMPTS:
        prompt = tuple(t % limits.vocab_size for t in raw)
        plain = SamplingParams(max_tokens=budget, beam_width=width)
        best = alone(prompt, plain)
        reqs.append(Request(prompt, plain, request_id=f"r{len(reqs)}"))
        for at in (0, 2):
            if at < len(best):
                params = SamplingParams(max_tokens=budget, beam_width=width,
                                        n=n if at else 1, stop_token_ids=(best[at],))
                reqs.append(Request(prompt, params, request_id=f"r{len(reqs)}"))
        if best and _min_tokens(limits):  # the best first token held back
            # Length penalty 0 where declared: the score is the cumulative logprob, so a
            # hypothesis of that first token alone would win, were it not held back.
            flat = 0.0 if "length_penalty" in limits.sampling_fields else 1.0
            params = SamplingParams(max_tokens=budget, beam_width=width, n=n, min_tokens=2,
                                    length_penalty=flat, stop_token_ids=(best[0],))
            reqs.append(Request(prompt, params, request_id=f"r{len(reqs)}"))
    return Workload(tuple(reqs), tuple(i % 2 for i in range(len(reqs))), label=BEAM_STOPS)


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    found = beam_stop_workload(drawing, alone) if alone is not None else None
    return [] if found is None else [found]


FEATURE = Feature("beams", needs="beam_width in supported_sampling (of the engine and of every "
                  "engine it is compared with)", declared=draws_beams,
                  configure=lambda limits, setting: {
                      "beam_width": beam_width_cap(limits, setting == FIT_VARIANTS)},
                  extra=_extra, seeds=_seeds)
