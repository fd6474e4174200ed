"""A tiny streaming completion server for the HTTP adapter's tests (stdlib only), in a thread
or as a process (`python -m tests.fake_server PORT`, for the launcher's tests).

Its "model": the continuation of a prompt is token i = (sum(prompt) + 7 i) % VOCAB, streamed
one message per token, `delay` seconds apart. Prompts whose first token is a trigger misbehave:
REFUSE -> 400 with a JSON error, LATE -> 200 and then an error message in the stream (as vLLM
refuses what its engine validates), STALL -> one token then silence, DIE -> one token then the
connection closes mid-stream. /v1/models gives max_model_len, /metrics vLLM's gauges
(requests in flight, plus `leftover`; KV usage 0.05 per request in flight), /props
llama-server's limits. `first_delay` holds the first token back (a prefill); `sent` records,
per streamed prompt, when the request came in and when each message went out
(time.perf_counter(): the bench's token-time tests).

Two holds let a test order events without any bound on the wall clock: with `gate` set, each
token message waits for one permit of it (the test releases them); with `hold_for` > 0, no
stream sends a token before that many streams have come in.

Planted leaks for the drain check (`State.leak`): "running" leaves every request that
finished counted as running; "kv" leaves 0.01 of KV usage behind per finished request.

A prefix cache, with `prefix_block` > 0: a request's prompt blocks (full blocks of that many
tokens) are cached under its tenant (the body's `model` and `cache_salt`) once its first token
is sent, and a request reports the prompt tokens it found cached, counted at its arrival (the
longest run of cached full blocks, its last prompt token never among them), as vLLM does with
--enable-prompt-tokens-details (`usage.prompt_tokens_details.cached_tokens` in the trailing
usage message, when the body asks for `stream_options.include_usage`) and llama-server does
(`timings.cache_n`, on every message with `timings_per_token`). Planted isolation bugs
(`State.prefix_bug`): "salt" keys the cache without the salt; "salted" never caches a salted
request (isolation by caching nothing).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = 64
MAX_MODEL_LEN = 48
REFUSE, STALL, DIE, LATE = 63, 62, 61, 60
REFUSAL = "This model's maximum context length is 48 tokens (fake refusal)"


def continuation(prompt: list[int], n: int) -> list[int]:
    return [(sum(prompt) + 7 * i) % VOCAB for i in range(n)]


@dataclass
class State:
    delay: float = 0.005
    first_delay: float = 0.0
    sent: dict[tuple[int, ...], tuple[float, list[float]]] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    leftover: int = 0  # requests /metrics claims besides those in flight
    disconnects: int = 0  # streams the client closed before their end
    triggers: bool = True  # off: every prompt is served (the suite draws every token id)
    leak: str = ""  # "", "running" or "kv": what a finished request leaves behind
    stuck: int = 0  # finished requests still counted as running (leak "running")
    kv_leaked: float = 0.0  # KV usage finished requests left behind (leak "kv")
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Semaphore | None = None  # set: one permit per token message
    hold_for: int = 0  # > 0: every stream's tokens wait until this many streams came in
    streams: int = 0  # streamed requests received
    all_in: threading.Event = field(default_factory=threading.Event)  # hold_for reached
    loras: dict[str, str] = field(default_factory=dict)  # adapters /v1/models lists: name -> root
    prefix_block: int = 0  # > 0: a prefix cache of blocks of this many tokens
    max_model_len: int = MAX_MODEL_LEN  # what /v1/models and /props say (it refuses nothing)
    prefix_bug: str = ""  # "", "salt" (key ignores the salt), "salted" (salted never cached)
    cached: set[tuple[object, ...]] = field(default_factory=set)  # (tenant, prefix) per block

    def tenant(self, body: dict[str, Any]) -> tuple[object, ...] | None:
        """The cache's key for the body's tenant; None: not cached at all."""
        salt = body.get("cache_salt")
        if self.prefix_bug == "salted" and salt is not None:
            return None
        return (body.get("model"), None if self.prefix_bug == "salt" else salt)

    def lookup(self, body: dict[str, Any], prompt: list[int]) -> int:
        """Prompt tokens found cached: whole blocks, the last prompt token never."""
        b, tenant = self.prefix_block, self.tenant(body)
        if b <= 0 or tenant is None:
            return 0
        n = 0
        with self.lock:
            while n + b <= len(prompt) - 1 and (tenant, tuple(prompt[:n + b])) in self.cached:
                n += b
        return n

    def store(self, body: dict[str, Any], prompt: list[int]) -> None:
        b, tenant = self.prefix_block, self.tenant(body)
        if b <= 0 or tenant is None:
            return
        with self.lock:
            for end in range(b, len(prompt) + 1, b):
                self.cached.add((tenant, tuple(prompt[:end])))


class Handler(BaseHTTPRequestHandler):
    state: State  # set per server class
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _json(self, code: int, data: object) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        s = self.state
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            cards = [{"id": name, "root": root, "parent": "fake"}  # as vLLM lists LoRA modules
                     for name, root in s.loras.items()]
            self._json(200, {"data": [{"id": "fake", "max_model_len": s.max_model_len}, *cards]})
        elif self.path == "/props":
            self._json(200, {"default_generation_settings": {"n_ctx": s.max_model_len},
                             "total_slots": 3})
        elif self.path == "/metrics":
            kv = min(1.0, 0.05 * s.in_flight + s.kv_leaked)
            raw = ("# HELP vllm:num_requests_running Number of requests in model execution.\n"
                   f'vllm:num_requests_running{{model_name="fake"}} '
                   f'{float(s.in_flight + s.stuck)}\n'
                   f'vllm:num_requests_waiting{{model_name="fake"}} {float(s.leftover)}\n'
                   f'vllm:kv_cache_usage_perc{{engine="0",model_name="fake"}} {kv}\n')
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw.encode())
        else:
            self._json(404, {"error": {"message": f"no {self.path}"}})

    def do_POST(self) -> None:
        s = self.state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.bodies.append(body)
        prompt = [int(t) for t in body["prompt"]]
        first = prompt[0] if s.triggers else -1
        if self.path not in ("/v1/completions", "/completion"):
            self._json(404, {"error": {"message": f"no {self.path}"}})
            return
        if int(body.get("repeat_last_n", 0)) < 0:  # as llama-server validates it
            self._json(400, {"error": {"code": 400, "type": "invalid_request_error", "message":
                             "Field 'repeat_last_n': Value must be between 0 <= value <= "
                             f"2147483647, but got {body['repeat_last_n']}"}})
            return
        if first == REFUSE:
            self._json(400, {"error": {"message": REFUSAL, "type": "BadRequestError"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")  # the stream ends with the connection
        self.end_headers()
        self.close_connection = True
        if first == LATE:
            error = {"error": {"message": REFUSAL, "type": "BadRequestError", "code": 400}}
            self.wfile.write(f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode())
            self.wfile.flush()
            return
        with s.lock:
            s.in_flight += 1
        received, times = time.perf_counter(), list[float]()
        with s.lock:
            s.sent[tuple(prompt)] = (received, times)
            s.streams += 1
            if s.hold_for and s.streams >= s.hold_for:
                s.all_in.set()
        try:
            hits = s.lookup(body, prompt)
            messages = (self._openai(prompt, body, hits) if self.path == "/v1/completions"
                        else self._llama(prompt, body, hits))
            if s.first_delay:
                time.sleep(s.first_delay)
            # Bounded only so that a test that never releases does not leave a thread behind.
            if s.hold_for and not s.all_in.wait(30):
                return
            for i, message in enumerate(messages):
                trailer = json.loads(message).get("choices") == []  # usage: no token
                if s.gate is not None and not trailer and not s.gate.acquire(timeout=30):
                    return
                if i == 1 and first == STALL:
                    time.sleep(3600)
                if i == 1 and first == DIE:
                    self.wfile.flush()
                    self.connection.close()
                    return
                # Stamped before the write: once written, the client may read the message
                # before this thread runs again, and a stamp after it would come too late.
                times.append(time.perf_counter())
                if i == 0:  # the prompt is computed: its blocks are cached from now on
                    s.store(body, prompt)
                self.wfile.write(f"data: {message}\n\n".encode())
                self.wfile.flush()
                time.sleep(s.delay)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            with s.lock:
                s.stuck += s.leak == "running"
                s.kv_leaked += 0.01 * (s.leak == "kv")
        except (BrokenPipeError, ConnectionResetError):
            with s.lock:
                s.disconnects += 1
        finally:
            with s.lock:
                s.in_flight -= 1

    def _openai(self, prompt: list[int], body: dict[str, Any], hits: int) -> Iterator[str]:
        stops = set(body.get("stop_token_ids") or ())
        k = int(body.get("logprobs") or 0)
        tokens = continuation(prompt, int(body["max_tokens"]))
        for i, t in enumerate(tokens):
            last = i == len(tokens) - 1 or t in stops
            choice: dict[str, Any] = {
                "index": 0, "text": f" t{t}", "token_ids": [t],
                "finish_reason": ("stop" if t in stops else "length") if last else None}
            if k:
                top = {f"token_id:{(t + j) % VOCAB}": math.log(0.5 / (j + 1)) for j in range(k)}
                choice["logprobs"] = {"tokens": [f"token_id:{t}"],
                                      "token_logprobs": [math.log(0.5)], "top_logprobs": [top]}
            yield json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [choice]})
            if last:
                break
        if (body.get("stream_options") or {}).get("include_usage"):
            usage: dict[str, Any] = {"prompt_tokens": len(prompt),
                                     "completion_tokens": i + 1}
            if self.state.prefix_block:  # as vLLM with --enable-prompt-tokens-details
                usage["prompt_tokens_details"] = {"cached_tokens": hits}
            yield json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [],
                              "usage": usage})

    def _llama(self, prompt: list[int], body: dict[str, Any], hits: int) -> Iterator[str]:
        # As llama-server streams: one token per partial message, then a final message with
        # no tokens that says why it stopped.
        k = int(body.get("n_probs") or 0)
        for t in continuation(prompt, int(body["n_predict"])):
            message: dict[str, Any] = {"content": f"{t:x}", "tokens": [t], "stop": False}
            if body.get("timings_per_token"):
                message["timings"] = {"cache_n": hits}
            if k:
                top = [{"id": (t + j) % VOCAB, "logprob": math.log(0.5 / (j + 1))}
                       for j in range(k)]
                message["completion_probabilities"] = [
                    {"id": t, "logprob": math.log(0.5), "top_logprobs": top}]
            yield json.dumps(message)
        yield json.dumps({"content": "", "tokens": [], "stop": True, "stop_type": "limit"})


def serve(port: int = 0, state: State | None = None) -> tuple[ThreadingHTTPServer, State]:
    """A server on 127.0.0.1 (port 0: a free one) serving in a daemon thread."""
    state = state or State()
    handler = type("FakeHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state


@contextmanager
def serving(state: State | None = None) -> Iterator[tuple[str, State]]:
    """`serve` for a test's duration: (its URL, its state), shut down afterwards."""
    server, state = serve(state=state)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":  # a process: `PORT [START_DELAY [LEAK]]`, serving until killed
    if os.environ.get("FAKE_IGNORE_SIGTERM"):  # as a server busy starting may
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))  # a slow start
    leak = sys.argv[3] if len(sys.argv) > 3 else ""
    httpd, _ = serve(int(sys.argv[1]), State(leak=leak, triggers=not leak))
    print(f"serving on {httpd.server_address[1]}", flush=True)
    threading.Event().wait()
