"""The HTTP adapter's stream client reads an unstreamed response (application/json, what
llama-server answers with `stream: false`, the guided llama configuration's mode) as one
message, whole: a string in it may hold characters that split lines (U+2028, U+0085, a raw
carriage return is escaped by JSON but these are not), which a line reader would cut."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http.stream import StreamClient  # noqa: E402

BODY = {"content": "a\u2028b\x85c", "tokens": [1, 2, 3], "stop": True, "stop_type": "limit"}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        raw = json.dumps(BODY, ensure_ascii=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_unstreamed_body_is_one_whole_message_then_the_end(url: str) -> None:
    client = StreamClient(url, connect_timeout=10, stall_timeout=30)
    try:
        assert client.open("k", "/completion", {"stream": False}).result(30).status == 200
        got: list[object] = []
        for _ in range(3):  # bounded: a client that never ends the stream fails, not hangs
            got += client.arrivals.take(30)
            if len(got) >= 2:
                break
        message, end = got
        assert message.data == BODY  # type: ignore[attr-defined]
        assert end.data is None and end.error is None  # type: ignore[attr-defined]
    finally:
        client.close()
