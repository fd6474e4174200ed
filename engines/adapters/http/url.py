"""A server named by its URL, as an engine spec: `--engine http://HOST:PORT?vocab_size=N`.

The spec is the server's base URL; what the server cannot say about itself rides in the
query string, one field a key (the keyword arguments of HTTPEngine of the same names):

    vocab_size       required: the model's vocabulary (config.json's vocab_size)
    dialect          openai (default: /v1/completions; vLLM) or llama (llama-server)
    model            the served model name (default: the first of /v1/models)
    max_model_len    where the server does not say it (vLLM and llama-server do)
    max_concurrency  requests it runs at once (the suite's bursts exceed it)
    max_logprobs     the most top logprobs it gives (vLLM: --max-logprobs, 20)
    stall_timeout    seconds of silence before a request fails (default 30)
    load_settle      seconds its /metrics may lag (the drain check; default 10)
    drain_timeout    seconds a new adapter waits for others' requests to leave (default 30)

engines.factories.load_factory hands every `http://` or `https://` spec here, so the suite's
`--engine`, `--reference-engine`, `--engine-variant NAME=...`, their ini keys and the bench's
`--engine` all take it. A bad spec is refused when it is read, naming the field and value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from engines.adapters.http.adapter import HTTPEngine
from engines.adapters.http.dialects import DIALECTS

__all__ = ["FIELDS", "parse_url_spec", "url_factory"]

# Query key -> its type; every one is HTTPEngine's keyword argument of the same name.
FIELDS: dict[str, type] = {
    "vocab_size": int, "dialect": str, "model": str, "max_model_len": int,
    "max_concurrency": int, "max_logprobs": int, "stall_timeout": float, "load_settle": float,
    "drain_timeout": float,
}
_POSITIVE = {"vocab_size", "max_model_len", "max_concurrency", "stall_timeout"}


def parse_url_spec(spec: str) -> tuple[str, dict[str, object]]:
    """(base URL, HTTPEngine keyword arguments) from `http[s]://host[:port][/path]?k=v&...`;
    ValueError naming the field and value for anything it cannot use."""
    parts = urlsplit(spec.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"scheme: {parts.scheme!r} is not http or https")
    if not parts.hostname:
        raise ValueError(f"host: the URL {spec!r} names no host (e.g. http://127.0.0.1:8000)")
    try:
        parts.port  # noqa: B018 (it raises on a port that is not a number)
    except ValueError:
        raise ValueError(f"port: {parts.netloc.rpartition(':')[2]!r} is not a port number"
                         ) from None
    if parts.fragment:
        raise ValueError(f"fragment: {parts.fragment!r}: a server URL has none")
    kw: dict[str, object] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in FIELDS:
            raise ValueError(f"{key}: {value!r}: no such field; the fields are "
                             f"{', '.join(FIELDS)}")
        if key in kw:
            raise ValueError(f"{key}: given twice ({kw[key]!r} and {value!r})")
        try:
            parsed = FIELDS[key](value)
        except ValueError:
            kind = "whole number" if FIELDS[key] is int else "number"
            raise ValueError(f"{key}: {value!r} is not a {kind}") from None
        if key in _POSITIVE and parsed <= 0:
            raise ValueError(f"{key}: {value!r} is not positive")
        if key in ("max_logprobs", "load_settle", "drain_timeout") and parsed < 0:
            raise ValueError(f"{key}: {value!r} is negative")
        if key == "dialect" and value not in DIALECTS:
            raise ValueError(f"dialect: {value!r} is not one of {', '.join(sorted(DIALECTS))}")
        kw[key] = parsed
    if "vocab_size" not in kw:
        raise ValueError("vocab_size: missing: add ?vocab_size=N, the model's vocabulary size "
                         "(config.json's vocab_size); no server endpoint says it")
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    return base, kw


def url_factory(spec: str) -> Callable[[], HTTPEngine]:
    """A zero-argument factory: each call, a new adapter over the server the spec names."""
    url, kw = parse_url_spec(spec)

    def factory() -> HTTPEngine:
        workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
        if workers and int(workers) > 1:
            # One server, several test processes: each would see the others' requests in the
            # server's counts (and wait for them to drain). Launched servers are per process.
            raise RuntimeError(f"{url} is one server shared by {workers} pytest-xdist "
                               "workers, whose requests it cannot tell apart: run the suite "
                               "on a server URL with -n 0")
        return HTTPEngine(url, **kw)  # type: ignore[arg-type]

    # In test ids (`<engine>-<check>`): the server's host and port.
    factory.__name__ = "http_" + re.sub(r"[^A-Za-z0-9]+", "_", urlsplit(url).netloc).strip("_")
    factory.__qualname__ = factory.__name__
    return factory
