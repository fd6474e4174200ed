"""A server named by URL as an engine spec (`--engine http://HOST:PORT?vocab_size=N`):
parsing, clear errors naming the field and value, the factory over the fake server, and the
whole suite pointed at fake servers by URL (engine and reference), the drain check included."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http import HTTPEngine  # noqa: E402
from engines.adapters.http.launch import Server, launch  # noqa: E402
from engines.adapters.http.url import parse_url_spec  # noqa: E402
from engines.factories import EngineSpecError, load_factory, load_labeled  # noqa: E402
from tests import fake_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_a_url_spec_is_the_base_url_and_the_adapters_fields() -> None:
    url, kw = parse_url_spec("http://10.0.0.7:8000/?vocab_size=151936&dialect=llama"
                             "&max_concurrency=16&stall_timeout=2.5&model=qwen")
    assert url == "http://10.0.0.7:8000"
    assert kw == {"vocab_size": 151936, "dialect": "llama", "max_concurrency": 16,
                  "stall_timeout": 2.5, "model": "qwen"}
    # A path prefix (a server behind a proxy) is kept; https is accepted.
    assert parse_url_spec("https://gw.example/llm/?vocab_size=64")[0] == "https://gw.example/llm"


@pytest.mark.parametrize("spec, message", [
    ("http://127.0.0.1:8000", "vocab_size: missing"),
    ("http://127.0.0.1:8000?vocab_size=big", "vocab_size: 'big' is not a whole number"),
    ("http://127.0.0.1:8000?vocab_size=0", "vocab_size: '0' is not positive"),
    ("http://127.0.0.1:8000?vocab_size=64&vocab=64", "vocab: '64': no such field"),
    ("http://127.0.0.1:8000?vocab_size=64&vocab_size=65", "vocab_size: given twice"),
    ("http://127.0.0.1:8000?vocab_size=64&dialect=tgi", "dialect: 'tgi' is not one of llama"),
    ("http://127.0.0.1:80x0?vocab_size=64", "port: '80x0' is not a port number"),
    ("http://:8000?vocab_size=64", "host: the URL"),
    ("http://127.0.0.1:8000?vocab_size=64#x", "fragment: 'x'"),
    ("http://127.0.0.1:8000?vocab_size=64&stall_timeout=-1", "stall_timeout: '-1' is not "
     "positive"),
])
def test_a_bad_url_spec_names_the_field_and_value(spec: str, message: str) -> None:
    with pytest.raises(EngineSpecError) as err:
        load_factory(spec, option="--reference-engine")
    assert str(err.value).startswith(f"--reference-engine {spec!r}: ")
    assert message in str(err.value), str(err.value)


@pytest.fixture
def fake_url() -> Iterator[str]:
    server, _ = fake_server.serve()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_factory_gives_a_new_adapter_over_the_server_each_call(
        fake_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    factory = load_factory(f"{fake_url}?vocab_size={fake_server.VOCAB}&max_logprobs=3")
    a, b = factory(), factory()
    assert isinstance(a, HTTPEngine) and a is not b
    assert (a.url, a.vocab_size, a.max_logprobs) == (fake_url, fake_server.VOCAB, 3)
    assert a.max_model_len == fake_server.MAX_MODEL_LEN  # from the server's /v1/models
    port = fake_url.rpartition(":")[2]
    assert factory.__name__ == f"http_127_0_0_1_{port}"  # the test ids' engine name
    # A label works as for module specs (--engine-variant NAME=URL).
    label, _ = load_labeled(f"tp8={fake_url}?vocab_size=64", option="--engine-variant")
    assert label == "tp8"
    assert isinstance(b, HTTPEngine)
    a.close()
    b.close()


def test_one_server_url_under_several_xdist_workers_is_refused(
        fake_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    factory = load_factory(f"{fake_url}?vocab_size=64")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    with pytest.raises(RuntimeError, match="shared by 2 pytest-xdist workers.*-n 0"):
        factory()


FAKE = [sys.executable, "-m", "tests.fake_server", "{port}", "0"]


def _fake(leak: str = "none") -> Server:
    return launch([*FAKE, leak], env={"PYTHONPATH": str(ROOT)}, timeout=30, name="fake")


def _suite(engine: str, reference: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "engines.testing.conformance",
         "--engine", engine, "--reference-engine", reference, "-p", "no:cacheprovider",
         "-p", "no:xdist", "-q", "--hypothesis-profile=batching-dev",
         "-k", "drain", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        # Not this run's xdist variables: the child is one process, and a URL factory
        # refuses to run under several workers.
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")})



def test_the_suite_runs_on_servers_named_by_url(launched: None) -> None:
    """Engine and reference both by URL (the reference is built at start-up, whichever checks
    run): a server leaving finished requests counted as running fails the drain check, by
    name, with a script that reaches the server the same way. (A correct fake server passing
    the whole drain search: tests/testing/checks/test_drain.py, in-process, cheaper.)"""
    ref, leaky = _fake(), _fake("running")
    # A leaking server never drains: new adapters over it (the suite's fresh engines) wait
    # only briefly.
    spec = "{}?vocab_size=" + str(fake_server.VOCAB) + "&load_settle=0.5&drain_timeout=0.5"
    failed = _suite(spec.format(leaky.url), spec.format(ref.url))
    out = failed.stdout
    assert failed.returncode == 1, out[-3000:] + failed.stderr[-2000:]
    assert f"reference engine {spec.format(ref.url)}" in out, out[:2000]
    assert "FAILED engines/testing/conformance.py::test_conformance[http_" in out, out[-3000:]
    assert "-drain]" in out and "1 failed" in out, out[-3000:]
    assert "still shows" in out and "request(s) running" in out, out[-5000:]
    # The report's script reaches the server the same way.
    assert f"make_engine = load_factory({spec.format(leaky.url)!r})" in out, out[-5000:]


def test_a_server_that_returns_text_without_token_ids_is_a_clear_error() -> None:
    # SGLang's and TGI's /v1/completions: the openai dialect cannot compare text.
    from engines.adapters.http.dialects import OpenAICompletions

    with pytest.raises(ValueError, match="token_ids: absent beside text"):
        OpenAICompletions().event({"choices": [{"index": 0, "text": " hello",
                                                "finish_reason": None}]})
    event = OpenAICompletions().event({"choices": [{"index": 0, "text": "", "token_ids": [5],
                                                    "finish_reason": "length"}]})
    assert event is not None and event.token_ids == (5,)
