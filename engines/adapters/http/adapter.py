"""A server behind the engine protocol, over HTTP (the protocol does not change for servers).

`add_request` checks the request as every engine does, sends it as one streamed completion and
waits for the status only: a 400 is `InvalidRequest` with the server's message, and the server
runs the request from then on, on its own clock, batched with whatever else is in flight.
`step()` returns the tokens that arrived since the last call; while work is pending it waits
for at least one message, up to `stall_timeout` seconds, and then fails with `ServerStalled`
(a server that stalls or dies fails the call, never hangs it). `abort_request` closes the
request's stream (the client disconnect servers act on) and owes its ABORT output.

For the bench (docs/usage.md, "Streaming engines"): `arrival_times()` gives, for the latest
step's outputs, when each token was read off the socket, and `step_by(deadline)` waits for a
first message no later than `deadline`, so an open-loop driver sends its next request on time.

Where the server counts its own load (vLLM's /metrics: requests running and waiting, KV use),
the adapter has LoadIntrospection and the suite's drain check asserts that the count returns
to rest after each workload: leak detection on a live server. Elsewhere it lacks the protocol.

What the suite cannot see over HTTP: when the server formed its batches (a step here is "what
arrived since the last call", not a server iteration), slots and KV blocks, and anything of a
request before its first token. Those checks skip, and say so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import httpx

from engines.adapters.common.book import Live, RequestBook
from engines.adapters.http.dialects import (
    Dialect,
    Event,
    StreamedError,
    dialect_named,
    vllm_load,
)
from engines.adapters.http.stream import Arrival, StreamClient
from engines.protocol import (
    Capabilities,
    FinishReason,
    InvalidRequest,
    Load,
    Request,
    StepOutput,
)

__all__ = ["HTTPEngine", "RefusedInStream", "ServerError", "ServerStalled", "from_env",
           "server_busy"]


class ServerError(RuntimeError):
    """The server failed a request (an error status other than 400, a broken stream, a
    message the dialect cannot read, or a stream that ended without finishing)."""


class RefusedInStream(ServerError):
    """The server refused a request inside its stream, after answering 200 (vLLM does so for
    what its engine validates, e.g. logprobs past --max-logprobs). add_request returned by
    then, so the adapter cannot make it an InvalidRequest: declare the limit instead (e.g.
    max_logprobs), and the adapter refuses such requests up front."""


class ServerStalled(ServerError):
    """Work is pending and nothing arrived within the stall timeout."""


# Requests each live adapter of this process has in flight, per server: a new adapter waits
# for the server to hold no others (HTTPEngine.wait_drained).
_live: weakref.WeakSet[HTTPEngine] = weakref.WeakSet()


class HTTPEngine:
    """A server reached at `url`, speaking `dialect` ("openai": /v1/completions; "llama":
    llama-server's /completion).

    Limits come from the server's own endpoints where it has them (vLLM's /v1/models
    max_model_len, llama-server's /props), else from the arguments; `vocab_size` has no
    endpoint anywhere and must be given. `max_logprobs`: the most top logprobs the server
    gives (vLLM's --max-logprobs, 20 by default; it refuses more only inside the stream), refused
    here above that. `log` names the server's log file for error messages. `load_settle`:
    how long the server's load report may lag the streams (the drain check waits that long).
    `refuse_seeded`: why this server cannot take seeded sampled requests (a known crash): they
    are refused with InvalidRequest naming `seed`, and `seeds` is declared an expected failure.
    `tokenizer`: the directory of the tokenizer.json of the server's vocabulary
    (Capabilities.tokenizer), for a server that takes the text features its dialect declares.
    """

    # LoadIntrospection (engines.protocol): set in __init__ only where the server reports its
    # load, so that an adapter over a server that cannot say does not seem to.
    load: Callable[[], Load]
    # Exercised, likewise: only where the server counts what its features did.
    exercised: Callable[[], dict[str, int]]

    def __init__(
        self,
        url: str,
        *,
        vocab_size: int,
        dialect: str | Dialect = "openai",
        model: str | None = None,
        max_model_len: int | None = None,
        max_concurrency: int | None = None,
        max_logprobs: int | None = None,
        stall_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        drain_timeout: float = 30.0,
        load_settle: float = 10.0,
        refuse_seeded: str | None = None,
        log: str | None = None,
        tokenizer: str | None = None,
    ) -> None:
        if not re.match(r"^https?://", url):
            raise ValueError(f"url: {url!r} is not an http:// or https:// URL")
        if int(vocab_size) < 1:
            raise ValueError(f"vocab_size: {vocab_size!r} is not a positive number of tokens")
        self.url = url.rstrip("/")
        # A name, or a dialect configured for this one server (e.g. its LoRA adapters' ids).
        self.dialect: Dialect = dialect_named(dialect) if isinstance(dialect, str) else dialect
        self.stall_timeout = float(stall_timeout)
        self.log = log
        self.vocab_size = int(vocab_size)
        found = self._limits(connect_timeout)
        self.model = model or found.get("model")
        limit = found.get("max_model_len", max_model_len)
        if limit is None:
            raise ValueError(f"max_model_len: {self.url} does not say its context length "
                             f"({self.dialect.name} dialect); pass max_model_len")
        self.max_model_len = int(limit)
        concurrency = found.get("max_concurrency", max_concurrency)  # None: not said
        self.max_logprobs = None if max_logprobs is None else int(max_logprobs)
        self._book = RequestBook()
        self._tokens: dict[str, list[int]] = {}  # key -> tokens so far
        self._times: dict[Hashable, list[float]] = {}  # the latest step's token arrivals
        self._heard = time.perf_counter()  # the last message (or send): for step_by's stall
        # The server's count of a request's cached prompt tokens, by stream key: pending until
        # an output carries it, then None. A finished request's last output waits in `_held`
        # for the count where it trails the finish (the dialect's usage_trails).
        self._counts: dict[str, int | None] = {}
        self._held: dict[str, tuple[StepOutput, float]] = {}  # with its tokens' arrival
        self._at = 0.0  # the arrival time of the message being read
        self._client = StreamClient(self.url, connect_timeout=connect_timeout,
                                    stall_timeout=stall_timeout)
        weakref.finalize(self, self._client.close)
        try:
            reports = self._read_load() is not None
        except ServerError:  # no such endpoint: the server does not say
            reports = False
        self.reports_load = reports
        if reports:
            self.load = self._load
        try:
            counts = self.dialect.counters(self._get_text) is not None
        except ServerError:
            counts = False
        if counts:
            self.exercised = self._counters
        self.refuse_seeded = refuse_seeded
        # What its dialect declares (its fields, its logprobs' kind, the StepOutput fields it
        # reads from the server: cached_prompt_tokens), and what the server said of itself.
        self._capabilities = Capabilities(
            supported_sampling=self.dialect.supported_sampling,
            output_fields=self.dialect.output_fields,
            expected_failed_checks={"seeds": refuse_seeded} if refuse_seeded else {},
            logprobs_of=self.dialect.logprobs_of,
            min_temperature=self.dialect.min_temperature,  # vLLM's floor, where it has one
            max_concurrency=None if concurrency is None else int(concurrency),
            load_settle_s=float(load_settle) if reports else 0.0,
            tokenizer=tokenizer)
        if drain_timeout > 0:  # 0: do not wait
            self.wait_drained(drain_timeout)
        _live.add(self)

    # -- set-up --------------------------------------------------------------------------------
    def _get(self, path: str, timeout: float) -> Any:
        return json.loads(self._get_text(path, timeout))

    def _limits(self, timeout: float) -> dict[str, Any]:
        return dict(self.dialect.limits(lambda path: self._get(path, timeout)))

    def _get_text(self, path: str, timeout: float | None = None) -> str:
        """The body of GET path; ServerError (naming the URL and the log) on anything else."""
        try:
            response = httpx.get(self.url + path, timeout=timeout or self.stall_timeout)
        except httpx.HTTPError as exc:
            raise ServerError(f"GET {self.url}{path} failed: {type(exc).__name__}: {exc}"
                              f"{self._log_hint()}") from exc
        if response.status_code != 200:
            raise ServerError(f"GET {self.url}{path} returned {response.status_code}: "
                              f"{response.text[:300]}{self._log_hint()}")
        return response.text

    def _read_load(self) -> Load | None:
        return self.dialect.load(self._get_text, self.url)

    def _load(self) -> Load:
        found = self._read_load()
        if found is None:
            raise ServerError(f"{self.url} stopped reporting its load ({self.dialect.name} "
                              f"dialect), which it did when the adapter was made"
                              f"{self._log_hint()}")
        return found

    def _counters(self) -> dict[str, int]:
        return self.dialect.counters(self._get_text) or {}

    def wait_drained(self, timeout: float) -> int:
        """Wait up to `timeout` s until the server runs nothing but this process's live
        adapters' requests (an adapter dropped mid-run leaves requests the server may still be
        finishing); return how many others it still counts then (0: drained). Read from the
        server's own load report where it has one (vLLM's /metrics); elsewhere 0, unchecked.

        A server that never drains is not refused here: with LoadIntrospection the drain
        check reports it, by name, after the adapter's first workload."""
        deadline = time.monotonic() + timeout
        while True:
            ours = sum(len(e._book.live()) for e in list(_live)
                       if e is not self and e.url == self.url)
            try:
                load = self._read_load()
            except ServerError:
                load = None
            busy = None if load is None else load.running + load.waiting
            if busy is None or busy <= ours:
                return 0
            if time.monotonic() > deadline:
                return busy - ours
            time.sleep(0.1)

    # -- the protocol --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """What it supports (engines.protocol.Capabilities): its dialect's fields, and what the
        server said of itself (its concurrency; load_settle_s where it reports its load)."""
        return self._capabilities

    def add_request(self, request: Request) -> None:
        p = request.params
        if self.refuse_seeded and p.seed is not None and p.temperature > 0:
            raise InvalidRequest(f"seed: {p.seed!r} is not supported by {self.url}: "
                                 f"{self.refuse_seeded}")
        logprobs = request.params.logprobs
        if (self.max_logprobs is not None and isinstance(logprobs, int)
                and logprobs > self.max_logprobs):
            raise InvalidRequest(f"logprobs: {logprobs!r} is more than the server gives "
                                 f"(max_logprobs {self.max_logprobs})")
        key = self._book.add(request, vocab_size=self.vocab_size,
                             max_model_len=self.max_model_len,
                             supported=self.dialect.supported_sampling)
        body = self.dialect.body(request, self.model)
        opened = self._client.open(key, self.dialect.path, body)
        try:
            status = opened.result(timeout=self.stall_timeout)
        except Exception as exc:
            self._book.discard(request.request_id)
            self._client.cancel(key)
            raise ServerError(f"POST {self.url}{self.dialect.path} for request "
                              f"{request.request_id!r} failed: {type(exc).__name__}: {exc}"
                              f"{self._log_hint()}") from exc
        if status.status == 200:
            self._tokens[key] = []
            self._heard = time.perf_counter()
            return
        self._book.discard(request.request_id)
        message = _message(status.text)
        if status.status == 400:
            raise InvalidRequest(f"{self.url} refused request {request.request_id!r}: {message}")
        raise ServerError(f"POST {self.url}{self.dialect.path} for request "
                          f"{request.request_id!r} returned {status.status}: {message}"
                          f"{self._log_hint()}")

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            self._client.cancel(key)
            self._tokens.pop(key, None)
            self._counts.pop(key, None)

    def has_work(self) -> bool:
        return self._book.has_work() or bool(self._held)

    def step(self) -> list[StepOutput]:
        return self._step(self.stall_timeout)

    def step_by(self, deadline: float) -> list[StepOutput]:
        """step(), but waiting for a first message only until `deadline` (time.perf_counter());
        may return nothing. A server silent for the stall timeout still fails."""
        return self._step(max(0.0, deadline - time.perf_counter()), partial=True)

    def arrival_times(self) -> dict[Hashable, list[float]]:
        """For the latest step's outputs: per request, when each of its tokens arrived
        (time.perf_counter(), one per token, in order)."""
        return self._times

    def _step(self, wait: float, partial: bool = False) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        self._times = {}
        # Wait for a first message only when nothing else is owed and a stream is open.
        waiting = not outputs and bool(self._book.live() or self._held)
        arrivals: list[Arrival] = self._client.arrivals.take(wait if waiting else 0)
        if waiting and not arrivals:
            silent = time.perf_counter() - self._heard
            if not partial or silent > self.stall_timeout:
                raise ServerStalled(
                    f"{self.url}: nothing arrived for {silent:.1f} s while "
                    f"{len(self._book.live())} request(s) are unfinished"
                    f"{self._log_hint()}")
        if arrivals:
            self._heard = time.perf_counter()
        for arrival in arrivals:
            held = self._held.get(arrival.key)
            at = arrival.at if held is None else held[1]  # a held output's tokens came then
            out = self._take(arrival)
            if out is not None:
                outputs.append(out)
                if out.token_ids:
                    self._times.setdefault(out.request_id, []).extend(
                        [at] * len(out.token_ids))
        return outputs

    def _take(self, arrival: Arrival) -> StepOutput | None:
        if arrival.key in self._held:
            return self._release(arrival)
        self._at = arrival.at
        live = self._book.get(arrival.key)
        if live is None:  # aborted (its ABORT was owed) or already failed
            return None
        rid = live.request.request_id
        if isinstance(arrival.error, httpx.ReadTimeout):
            # The client's read timeout is the stall timeout too: whichever of it and step's
            # own wait fires first, a silent server is the same ServerStalled.
            raise ServerStalled(f"{self.url}: nothing arrived on the stream of request {rid!r} "
                                f"for {self.stall_timeout:.1f} s{self._log_hint()}"
                                ) from arrival.error
        if arrival.error is not None:
            raise ServerError(f"{self.url}: the stream of request {rid!r} failed: "
                              f"{type(arrival.error).__name__}: {arrival.error}"
                              f"{self._log_hint()}") from arrival.error
        if arrival.data is None:
            raise ServerError(f"{self.url}: the stream of request {rid!r} ended after "
                              f"{live.emitted} token(s) without a finish reason"
                              f"{self._log_hint()}")
        try:
            event = self.dialect.event(arrival.data)
        except StreamedError as exc:
            raise RefusedInStream(
                f"{self.url} refused request {rid!r} inside its stream after answering 200 "
                f"(code {exc.code}): {exc}; a limit the adapter was not told (e.g. "
                f"max_logprobs) lets it refuse such requests at add_request"
                f"{self._log_hint()}") from exc
        except (ValueError, TypeError, KeyError) as exc:
            raise ServerError(f"{self.url}: request {rid!r}: a message the {self.dialect.name} "
                              f"dialect cannot read ({exc}): {json.dumps(arrival.data)[:300]}"
                              ) from exc
        return None if event is None else self._delta(live, event)

    def _delta(self, live: Live, event: Event) -> StepOutput | None:
        if getattr(self.dialect, "client_stops", False):
            event = self._client_stop(live, event)
        tokens = self._tokens[live.key]
        tokens += event.token_ids
        if event.finish is FinishReason.ABORT:
            raise ServerError(f"{self.url} aborted request {live.request.request_id!r} on its "
                              f"own after {len(tokens)} token(s){self._log_hint()}")
        out = self._book.delta(live, tokens, event.finish, event.top_logprobs)
        if event.finish is not None:
            del self._tokens[live.key]
        if out is not None and event.logprobs is not None and out.logprobs is None:
            # The server's own sampled logprobs, where its top ones lack the sampled token.
            out = StepOutput(out.request_id, out.token_ids, out.finish_reason, out.top_logprobs,
                             event.logprobs)
        if out is not None and event.text is not None:
            p = live.request.params
            text = event.text + (event.stop_word if p.include_stop_str_in_output else "")
            out = dataclasses.replace(out, text=text)
        return self._count(live.key, event, out)

    def _count(self, key: str, event: Event, out: StepOutput | None) -> StepOutput | None:
        """The server's count of cached prompt tokens on the request's next output, once;
        a finishing output held back where the count trails it (`_release`)."""
        if event.cached is not None:
            self._counts.setdefault(key, event.cached)
        if out is None:
            return None
        pending = self._counts.get(key)
        if pending is not None:
            out = dataclasses.replace(out, cached_prompt_tokens=pending)
            self._counts[key] = None
        if out.finished:
            reported = key in self._counts
            self._counts.pop(key, None)
            if not reported and getattr(self.dialect, "usage_trails", False):
                self._held[key] = (out, self._at)
                return None
        return out

    def _release(self, arrival: Arrival) -> StepOutput:
        """A held finishing output, with the count the message after it carries (none where
        the stream ended, or failed, without one: the request had finished)."""
        out = self._held.pop(arrival.key)[0]
        if arrival.data is None or arrival.error is not None:
            return out
        try:
            event = self.dialect.event(arrival.data)
        except Exception:  # noqa: BLE001 - a finished request's trailer: nothing to judge
            return out
        if event is None or event.cached is None:
            return out
        return dataclasses.replace(out, cached_prompt_tokens=event.cached)

    def _client_stop(self, live: Live, event: Event) -> Event:
        """stop_token_ids for a server that has none (llama-server: its stops are strings):
        the request finishes STOP at the first stop id that arrives, and its stream is
        closed, so the server stops generating too."""
        stops = live.request.params.stop_token_ids
        for i, token in enumerate(event.token_ids):
            if token in stops:
                self._client.cancel(live.key)
                n = i + 1
                # No text: the server's runs past the cut (the tokens after it).
                return Event(event.token_ids[:n], FinishReason.STOP,
                             None if event.top_logprobs is None else event.top_logprobs[:n],
                             None if event.logprobs is None else event.logprobs[:n],
                             cached=event.cached)
        return event

    # -- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every stream (the server aborts what is in flight)."""
        self._client.close()

    def _log_hint(self) -> str:
        return f" (server log: {self.log})" if self.log else ""


def _message(text: str) -> str:
    """The server's error message from its JSON error body, else the body."""
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return text[:500]


def server_busy(url: str, timeout: float = 5.0) -> int | None:
    """Requests the server runs or queues, from vLLM's Prometheus gauges on /metrics; None
    where the server has no such metrics."""
    try:
        response = httpx.get(url.rstrip("/") + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    load = vllm_load(response.text, url)
    return None if load is None else load.running + load.waiting


# The environment form: BATCHING_ENGINE_URL and what the server cannot say about itself.
URL = "BATCHING_ENGINE_URL"
_SETTINGS = {
    "BATCHING_ENGINE_VOCAB_SIZE": "vocab_size",
    "BATCHING_ENGINE_DIALECT": "dialect",
    "BATCHING_ENGINE_MODEL": "model",
    "BATCHING_ENGINE_MAX_MODEL_LEN": "max_model_len",
    "BATCHING_ENGINE_MAX_CONCURRENCY": "max_concurrency",
    "BATCHING_ENGINE_MAX_LOGPROBS": "max_logprobs",
    "BATCHING_ENGINE_STALL_TIMEOUT": "stall_timeout",
}
_NUMBERS = {"vocab_size": int, "max_model_len": int, "max_concurrency": int, "max_logprobs": int,
            "stall_timeout": float}


def from_env() -> HTTPEngine:
    """An adapter over the server at $BATCHING_ENGINE_URL (`--engine
    engines.adapters.http:from_env`): the user's own server. $BATCHING_ENGINE_VOCAB_SIZE is
    required (no server endpoint gives it); optional: _DIALECT (openai | llama), _MODEL,
    _MAX_MODEL_LEN (where the server does not say it), _MAX_CONCURRENCY, _MAX_LOGPROBS (vLLM:
    --max-logprobs, default 20), _STALL_TIMEOUT (seconds). The servers the tests launch are
    engines.adapters.http.variants."""
    url = os.environ.get(URL)
    if not url:
        raise ValueError(f"{URL} is not set: set it to the server's base URL, e.g. "
                         "http://127.0.0.1:8000")
    kw: dict[str, object] = {}
    for var, name in _SETTINGS.items():
        value = os.environ.get(var)
        if not value:
            continue
        try:
            kw[name] = _NUMBERS[name](value) if name in _NUMBERS else value
        except ValueError:
            raise ValueError(f"{var}: {value!r} is not a number") from None
    if "vocab_size" not in kw:
        raise ValueError("BATCHING_ENGINE_VOCAB_SIZE is not set: the model's vocabulary size "
                         "(config.json's vocab_size); no server endpoint says it")
    return HTTPEngine(url, **kw)  # type: ignore[arg-type]
