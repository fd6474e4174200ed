"""Per-child deltas for a request with children (n > 1, or beam search's n best): each child
has its own token stream (StepOutput.index) and its own finishing output, and the request is
finished once every child is. The RequestBook's `delta` does this for a request of one child;
an adapter whose library forks a request keeps one Family per such request beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engines.adapters.common.book import Live, RequestBook
from engines.protocol import FinishReason, StepOutput

__all__ = ["Family"]


class Family:
    """The children of one request: what each has returned and whether it finished."""

    def __init__(self, live: Live, n: int) -> None:
        self.live = live
        self.emitted = [0] * n
        self.finished = [False] * n

    def delta(self, book: RequestBook, index: int, cumulative: Sequence[int],
              finish: FinishReason | None,
              top_logprobs: Sequence[Mapping[int, float]] | None = None) -> StepOutput | None:
        """Child `index`'s tokens of `cumulative` not yet returned, as one output (None: nothing
        to say); the request leaves `book` when its last child finishes. `top_logprobs` covers
        the new tokens, one mapping each (as RequestBook.delta); None where the library has
        none."""
        if self.finished[index]:
            return None
        new = tuple(int(t) for t in cumulative[self.emitted[index]:])
        self.emitted[index] = len(cumulative)
        if finish is None and not new:
            return None
        if finish is not None:
            self.finished[index] = True
            if all(self.finished):
                book.discard(self.live.request.request_id)
        tops, sampled = None, None
        if top_logprobs is not None and self.live.request.params.logprobs > 0:
            tops = tuple(top_logprobs)
            if len(tops) == len(new) and all(t in m for t, m in zip(new, tops, strict=True)):
                sampled = tuple(m[t] for t, m in zip(new, tops, strict=True))
        return StepOutput(self.live.request.request_id, new, finish, tops, sampled, index=index)

    def done(self) -> bool:
        return all(self.finished)
