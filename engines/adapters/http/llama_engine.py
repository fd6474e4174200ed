"""The HTTP adapter over a llama-server, with what the plain HTTPEngine cannot say: the
LoRA adapters the server was launched with (`loras`, for the reference), the checks its
configuration knowingly fails, the precision it was launched at, and a stream per child for
n > 1 (llama-server's n_cmpl sends every child over the request's one response)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from engines.adapters.common.book import Live
from engines.adapters.http.adapter import HTTPEngine, ServerError
from engines.adapters.http.dialects import Event
from engines.adapters.http.stream import Arrival
from engines.protocol import Capabilities, FinishReason, StepOutput

__all__ = ["LlamaEngine"]


@dataclass(slots=True)
class _Child:
    emitted: int = 0  # tokens returned so far
    done: bool = False


class LlamaEngine(HTTPEngine):
    """HTTPEngine over a llama-server, declaring what the server was launched with beside
    what its dialect says: `loras` (adapter name -> the PEFT directory its GGUF was converted
    from, which a reference engine loads) where it serves adapters, the checks the
    configuration knowingly fails (`known_failures`, check name -> why), and the precision
    its GGUF and KV cache hold (`dtype`, `kv_cache_dtype`: Capabilities' own; the server
    does not say its cache's, so the one who launched it does).

    n > 1 (where the dialect declares `n`): llama-server's n_cmpl streams every child over
    the request's one response, each message naming its child (`index`); each child gets
    its own outputs (StepOutput.index), its own budget and finish, and its own stop ids (a
    child that reaches one finishes STOP; the stream is closed once every child has
    finished). An aborted request's ABORT goes to each child that had not finished, as our
    engines end them."""

    def __init__(self, url: str, *, loras: Mapping[str, str] | None = None,
                 known_failures: Mapping[str, str] | None = None, dtype: str = "float32",
                 kv_cache_dtype: str | None = None, **kw: Any) -> None:
        super().__init__(url, **kw)
        if loras:
            self.loras = dict(loras)
        self._known_failures = dict(known_failures or {})
        # Checked now (a ValueError naming the field), not at the suite's first capabilities().
        self._precision = Capabilities(dtype=dtype, kv_cache_dtype=kv_cache_dtype)
        self._kids: dict[str, dict[int, _Child]] = {}  # stream key -> child -> its state
        self._index = 0  # the child of the message being read

    def capabilities(self) -> Capabilities:
        """HTTPEngine's, with the configuration's known failures among the expected ones and
        the precision it was launched at."""
        own = super().capabilities()
        return dataclasses.replace(own, expected_failed_checks={
            **own.expected_failed_checks, **self._known_failures},
            dtype=self._precision.dtype, kv_cache_dtype=self._precision.kv_cache_dtype)

    def abort_request(self, request_id: Hashable) -> None:
        live = next((live for live in self._book.live()
                     if live.request.request_id == request_id), None)
        super().abort_request(request_id)
        if live is not None:
            kids = self._kids.pop(live.key, {})
            n = live.request.params.n
            if n > 1:
                self._book.abort_children(request_id, [
                    i for i in range(n) if not (i in kids and kids[i].done)])

    def _take(self, arrival: Arrival) -> StepOutput | None:
        data = arrival.data
        self._index = int(data.get("index") or 0) if isinstance(data, Mapping) else 0
        return super()._take(arrival)

    def _delta(self, live: Live, event: Event) -> StepOutput | None:
        n = live.request.params.n
        if n <= 1:
            return super()._delta(live, event)
        if not 0 <= self._index < n:
            raise ServerError(f"{self.url}: request {live.request.request_id!r} (n={n}) got "
                              f"a message for child {self._index}")
        kids = self._kids.setdefault(live.key, {})
        kid = kids.setdefault(self._index, _Child())
        if kid.done:  # a child finished by a stop id: the server's later tokens are past it
            return None
        tokens, finish = event.token_ids, event.finish
        tops, sampled = event.top_logprobs, event.logprobs
        stops = live.request.params.stop_token_ids
        cut = next((i + 1 for i, t in enumerate(tokens) if t in stops), None)
        if cut is not None:
            tokens, finish = tokens[:cut], FinishReason.STOP
            tops = None if tops is None else tops[:cut]
            sampled = None if sampled is None else sampled[:cut]
        if finish is FinishReason.ABORT:
            raise ServerError(f"{self.url} aborted request {live.request.request_id!r} on its "
                              f"own{self._log_hint()}")
        kid.emitted += len(tokens)
        kid.done = finish is not None
        if live.request.params.logprobs > 0:
            tops = tuple(tops or ())
            if sampled is None and len(tops) == len(tokens) and all(
                    t in m for t, m in zip(tokens, tops, strict=True)):
                sampled = tuple(m[t] for t, m in zip(tokens, tops, strict=True))
        else:
            tops = sampled = None
        if not tokens and finish is None:
            return None
        out = StepOutput(live.request.request_id, tuple(tokens), finish, tops, sampled,
                         index=self._index)
        if len(kids) == n and all(k.done for k in kids.values()):
            # Every child finished: the request leaves the book, its stream is closed.
            self._book.delta(live, (), FinishReason.STOP)
            self._tokens.pop(live.key, None)
            self._kids.pop(live.key, None)
            self._client.cancel(live.key)
        return out
