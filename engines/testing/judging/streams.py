"""A request's streams, one per child: a check written for one stream per request (its tokens,
its finish, its text) judges each child of an n > 1 family through a view of the trace that
holds only that child's outputs, and says which child it judged.

A child's view counts it finished where its own last output finishes it (STOP or LENGTH) and
aborted where that output is ABORT: a family aborted after one child finished holds a
finished child, judged whole, beside aborted ones, judged as prefixes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from engines.protocol import FinishReason, Request
from engines.testing.recorder import Trace

__all__ = ["child_view", "streams_of"]


def child_view(trace: Trace, r: Request, index: int) -> Trace:
    """`trace` as if request `r` had only child `index`'s outputs."""
    rid = r.request_id
    outs = [(s, o) for s, o in trace.outputs.get(rid, []) if o.index == index]
    finished = {k: v for k, v in trace.finished_at.items() if k != rid}
    aborted = {k: v for k, v in trace.aborted_at.items() if k != rid}
    final = next(((s, o) for s, o in outs if o.finished), None)
    if final is not None and final[1].finish_reason == FinishReason.ABORT:
        aborted[rid] = trace.aborted_at.get(rid, final[0])
    elif final is not None:
        finished[rid] = final[0]
    elif rid in trace.aborted_at:
        aborted[rid] = trace.aborted_at[rid]
    return dataclasses.replace(trace, outputs={**trace.outputs, rid: outs},
                               finished_at=finished, aborted_at=aborted)


def streams_of(trace: Trace, r: Request) -> Iterator[tuple[str, Trace]]:
    """("", trace) for a request of one stream; (" child i", its view) for each child of an
    n > 1 family (a beam search's children are its beams, not streams of their own)."""
    n, width = r.params.n, r.params.beam_width
    if not isinstance(n, int) or n < 2 or (isinstance(width, int) and width > 1):
        yield "", trace
        return
    for i in range(n):
        yield f" child {i}", child_view(trace, r, i)
