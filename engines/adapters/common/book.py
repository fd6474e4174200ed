"""Request bookkeeping every adapter shares: the library's own request ids, cumulative token
lists turned into per-step deltas, and the ABORT outputs neither library emits itself."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

from engines.core.validation import check_request
from engines.protocol import BASE_PARAMS, FinishReason, Request, StepOutput


@dataclass(slots=True)
class Live:
    request: Request
    key: str  # the id the library knows the request by
    emitted: int = 0  # tokens already returned by step()


class RequestBook:
    """Every request added and not yet finished, under our id and under the library's.

    The library gets fresh string keys rather than our ids: its ids must be strings, and a key
    is never reused, so a cancelled request's id can come back without meeting its old state.
    """

    def __init__(self) -> None:
        self._by_id: dict[Hashable, Live] = {}
        self._by_key: dict[str, Live] = {}
        self._aborted: list[Hashable] = []  # cancelled; their ABORT output is still owed
        # n > 1: the children an aborted request owes its ABORT to (absent: child 0 alone).
        self._aborted_children: dict[Hashable, tuple[int, ...]] = {}
        self._keys = itertools.count()

    def in_flight(self) -> set[Hashable]:
        # An aborted id stays in flight until step() has returned its ABORT output.
        return set(self._by_id) | set(self._aborted)

    def has_work(self) -> bool:
        return bool(self._by_id or self._aborted)

    def live(self) -> list[Live]:
        """Requests added and not yet finished or aborted, oldest first."""
        return list(self._by_id.values())

    def keys(self) -> list[str]:
        """The library keys of those requests."""
        return list(self._by_key)

    def add(self, request: Request, *, vocab_size: int, max_model_len: int,
            supported: Collection[str] = BASE_PARAMS) -> str:
        """Refuse bad input (before the library sees it), and any SamplingParams field outside
        `supported` (the adapter's supported_sampling), then track the request."""
        check_request(
            request, vocab_size=vocab_size, max_model_len=max_model_len, in_flight=self.in_flight(),
            supported=supported,
        )
        live = Live(request, f"r{next(self._keys)}")
        self._by_id[request.request_id] = live
        self._by_key[live.key] = live
        return live.key

    def discard(self, request_id: Hashable) -> None:
        """Forget a request the library refused after `add` accepted it: no output is owed."""
        live = self._by_id.pop(request_id, None)
        if live is not None:
            del self._by_key[live.key]

    def get(self, key: str) -> Live | None:
        return self._by_key.get(key)

    def abort(self, request_id: Hashable) -> str | None:
        """Forget an unfinished request and owe its ABORT; returns the key to cancel, if any."""
        try:
            live = self._by_id.pop(request_id)
        except (KeyError, TypeError):  # unknown, finished or unhashable id: a no-op
            return None
        del self._by_key[live.key]
        self._aborted.append(request_id)
        return live.key

    def abort_children(self, request_id: Hashable, indexes: Sequence[int]) -> None:
        """A request with n > 1 just aborted (`abort`): its ABORT is owed to each of these
        children, its unfinished ones (a child that finished has had its last output), as
        the protocol's engines end every unfinished child."""
        if request_id in self._aborted:
            self._aborted_children[request_id] = tuple(indexes)

    def take_aborts(self) -> list[StepOutput]:
        outputs = [StepOutput(rid, (), FinishReason.ABORT, index=i) for rid in self._aborted
                   for i in self._aborted_children.pop(rid, (0,))]
        self._aborted.clear()
        return outputs

    def delta(
        self,
        live: Live,
        cumulative: Sequence[int],
        finish: FinishReason | None,
        top_logprobs: Sequence[Mapping[int, float]] | None = None,
    ) -> StepOutput | None:
        """The tokens of `cumulative` not yet returned, as one output (None: nothing to say).

        `top_logprobs` covers the same new tokens, one mapping each.
        """
        new = tuple(int(t) for t in cumulative[live.emitted :])
        live.emitted = len(cumulative)
        if finish is not None:
            del self._by_id[live.request.request_id]
            del self._by_key[live.key]
        elif not new:
            return None
        tops, sampled = None, None
        if live.request.params.logprobs > 0:
            tops = tuple(top_logprobs) if top_logprobs is not None else ()
            # The sampled token's own logprob, where the library put it among the top ones
            # (vLLM always does).
            if len(tops) == len(new) and all(t in m for t, m in zip(new, tops, strict=True)):
                sampled = tuple(m[t] for t, m in zip(new, tops, strict=True))
        return StepOutput(live.request.request_id, new, finish, tops, sampled)


def stop_or_length(request: Request, tokens: Sequence[int]) -> FinishReason:
    """The finish reason of a request the library ended on its own, read from its tokens."""
    if tokens and int(tokens[-1]) in request.params.stop_token_ids:
        return FinishReason.STOP
    return FinishReason.LENGTH
