"""Features drawn together (issue 51): a feature's extra requests (an n > 1 family) pass,
request by request, through the per-request hooks of the features it `composes` with (stop
strings drawn from the family's child 0 served alone, so one child completes one and its
siblings, sampled under other seeds, most often do not), and are aborted late in their lives
(after a child has finished, or while a stop string's start is held back).

Each request's composition is a draw that shrinks to off: a shrunk counterexample keeps a
composed family only where the failure needs it. Only where an `alone` oracle is given (the
stop strings are taken from the output), and never on unseeded sampled requests, whose output
served alone says nothing of what they will generate (as for the mix's requests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import strategies as st

from engines.protocol import Request
from engines.testing.features import FEATURES, Drawing, Feature
from engines.testing.features.base import AloneFn
from engines.testing.workload import Abort

__all__ = ["Composed", "composed", "late_aborts"]


@dataclasses.dataclass(frozen=True, slots=True)
class Composed:
    """A feature's extra requests after composition, and the late aborts drawn for them:
    (request id, steps after its arrival)."""

    requests: list[Request]
    aborts: list[tuple[str, int]]


def partners(drawing: Drawing, feature: Feature) -> list[Feature]:
    """The drawn features whose per-request hooks `feature`'s requests may go through."""
    return [f for f in FEATURES if f.name in feature.composes and drawing.draws(f)
            and (f.params is not None or f.stops is not None)]


@st.composite
def composed(draw: st.DrawFn, drawing: Drawing, feature: Feature, requests: Sequence[Request],
             alone: AloneFn | None) -> Composed:
    """`requests` (feature's extra ones), each composed by draw with its partners' hooks, and
    for each composed one a late abort by draw: 1..max_tokens + 1 steps after its arrival
    (a family's stop ids and strings end some children before then)."""
    with_ = partners(drawing, feature)
    if not feature.composes or alone is None:
        return Composed(list(requests), [])
    out: list[Request] = []
    late: list[tuple[str, int]] = []
    for r in requests:
        p, rid = r.params, str(r.request_id)
        # Three requests in four composed (the families are few); 0, uncomposed, shrinks first.
        if draw(st.integers(0, 3), label=f"{rid}.composed") == 0:
            out.append(r)
            continue
        prompt = r.prompt_token_ids
        for partner in with_:
            if partner.params is not None:
                p = draw(partner.params(drawing, prompt, p, alone),
                         label=f"{rid}.{partner.name}")
            if partner.stops is not None and not (p.temperature > 0 and p.seed is None):
                own = alone(prompt, p)  # child 0's tokens (engines.testing.oracle)
                p = draw(partner.stops(drawing, own, prompt, p), label=f"{rid}.{partner.name}")
        out.append(dataclasses.replace(r, params=p))
        if drawing.abortable:
            after = draw(st.one_of(st.none(), st.integers(1, p.max_tokens + 1)),
                         label=f"{rid}.late_abort")
            if after is not None:
                late.append((rid, after))
    return Composed(out, late)


def late_aborts(requests: Sequence[Request], arrivals: Sequence[int],
                picks: Sequence[tuple[str, int]]) -> tuple[Abort, ...]:
    """The late aborts drawn by `composed`, at steps after each request's arrival."""
    at = {str(r.request_id): s for r, s in zip(requests, arrivals, strict=True)}
    return tuple(Abort(at[rid] + after, rid) for rid, after in picks if rid in at)
