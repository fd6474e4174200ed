"""Report 34: llama-server, tokens of a speculative step come without
`completion_probabilities`.

Standalone: the standard library only (urllib); it starts llama-server on 127.0.0.1 itself.
The same greedy request, `{"prompt": [49], "n_predict": 6, "temperature": 0, "n_probs": 2,
"return_tokens": true}` streamed and not, goes to three servers over the `tiny` preset (F32,
F32 KV cache, no flash attention, 4 slots, one thread): no speculation; a draft model (`-md`,
the `tiny-draft` preset: tiny's first 2 of 4 layers; `--spec-type draft-simple
--spec-draft-n-max 4`); llama.cpp's n-gram drafter (`--spec-type ngram-simple`, 1-token
lookups, 24 tokens so that it drafts). Each counts the generated tokens that come with their
probabilities, and the unstreamed logprobs of the draft-model server are compared with those of
the server without speculation (same greedy tokens).

The GGUF files are the project's presets converted by llama.cpp's own convert_hf_to_gguf.py,
through the project's wrapper (which only replaces the vocabulary: the presets have no real
tokenizer, and the converter refuses one it does not know; llama.cpp's "test" vocabulary, a
bare token list, stands in). With SRC the llama.cpp tree llama-server was built from
(`bash ci/llama-server-env.sh` keeps it as ~/.cache/batching-engines/llama-server-0.3.36/src)
and DIR the folder of `python -m engines.findings models DIR`, in this project's venv:

    python -m engines.adapters.http.gguf_convert SRC DIR/tiny tiny.gguf
    python -m engines.adapters.http.gguf_convert SRC DIR/tiny-draft tiny-draft.gguf

    python docs/findings/r34_llamacpp_spec_logprobs.py --server-bin BIN --gguf tiny.gguf \
        --draft-gguf tiny-draft.gguf

(BIN: the last stdout line of `bash ci/llama-server-env.sh`.)
Exit 1: a speculating server leaves tokens without probabilities (the bug); 0: none does;
2: cannot run.
"""

LEDGER = {
    "report": 34,
    "library": "llama.cpp",
    "venv": "llama-server",
    "presets": ["tiny", "tiny-draft"],
    "workaround": "engines/adapters/http/llama_variants.py: the speculating factories declare "
                  "logprobs an expected failure (SPEC_LOGPROBS)",
    "args": ["--server-bin", "{server}", "--gguf", "{gguf:tiny}",
             "--draft-gguf", "{gguf:tiny-draft}"],
    "upstream": "known: ggml-org/llama.cpp PR #27196 (open, not merged), after #24271 (closed); "
                "#27972 (open); not filed again",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

TITLE = "report 34: llama-server, tokens of a speculative step come without probabilities"
LOGPROBS: list[list[float]] = []  # each server's unstreamed logprobs of its tokens
BODY = {"prompt": [49], "n_predict": 6, "temperature": 0, "n_probs": 2, "return_tokens": True}


def cannot_run(why: str) -> NoReturn:
    print(f"RESULT: cannot-run {why}")
    sys.exit(2)


def server_version(binary: Path) -> str:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        cannot_run(f"{binary} --version failed: {e}")
    lines = [x.strip() for x in (out.stdout + out.stderr).splitlines() if x.strip()]
    return " / ".join(x for x in lines if x.startswith(("version", "built"))) or "unknown"


class Server:
    """llama-server on 127.0.0.1 (a free port), its log in a temporary file, stopped on exit."""

    def __init__(self, binary: Path, args: list[str], slots: int = 4) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log",
                                               delete=False)
        self.argv = [str(binary), *args, "--host", "127.0.0.1", "--port", str(port),
                     "-c", str(512 * slots), "--parallel", str(slots), "--no-kv-unified",
                     "--cache-type-k", "f32", "--cache-type-v", "f32", "--flash-attn", "off",
                     "-t", "1", "-tb", "1", "--no-webui"]
        self.process = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                cannot_run(f"llama-server exited {self.process.returncode} at start-up: "
                           f"{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        self.stop()
        cannot_run(f"llama-server not healthy in 300 s: {self.tail()}")

    def tail(self) -> str:
        return " | ".join(Path(self.log.name).read_text(errors="replace").splitlines()[-5:])

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=300) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as r:
            return json.loads(r.read())

    def stream(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The server-sent events of a streamed request, as dicts."""
        request = urllib.request.Request(self.url + path,
                                         data=json.dumps({**body, "stream": True}).encode(),
                                         headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(request, timeout=300) as r:
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: ") and line != "data: [DONE]":
                    events.append(json.loads(line[len("data: "):]))
        return events

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        os.unlink(self.log.name)


def probability_counts(server: Server, body: dict[str, Any]) -> tuple[list[tuple[int, int]],
                                                                     tuple[int, int], int, int]:
    """Streamed: (tokens, probability entries) per message; unstreamed: the same in all; the
    drafts made and accepted."""
    per_message = []
    for event in server.stream("/completion", body):
        tokens = event.get("tokens") or []
        probs = event.get("completion_probabilities") or []
        if tokens or probs:
            per_message.append((len(tokens), len(probs)))
    whole = server.post("/completion", body)
    timings = whole.get("timings") or {}
    entries = whole.get("completion_probabilities") or []
    LOGPROBS.append([round(float(e.get("logprob", 0.0)), 4) for e in entries])
    return (per_message, (len(whole.get("tokens") or []), len(entries)),
            int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", type=Path, help="llama-server")
    parser.add_argument("--model-dir", type=Path,
                        help="accepted for a uniform call; unused: the model files are GGUF "
                             "files given below")
    parser.add_argument("--gguf", type=Path, help="the tiny preset as GGUF")
    parser.add_argument("--draft-gguf", type=Path,
                        help="the tiny-draft preset as GGUF")
    args = parser.parse_args()
    print(TITLE)
    if not args.server_bin:
        cannot_run("missing --server-bin (see the docstring for how to make it)")
    if not args.gguf:
        cannot_run("missing --gguf (see the docstring for how to make it)")
    if not args.draft_gguf:
        cannot_run("missing --draft-gguf (see the docstring for how to make it)")
    for path in (args.server_bin, args.gguf, args.draft_gguf):
        if not path.is_file():
            cannot_run(f"no file {path}")
    print(f"llama-server {server_version(args.server_bin)}")
    configs = {
        "no speculation": [],
        "draft model": ["-md", str(args.draft_gguf), "--spec-type", "draft-simple",
                        "--spec-draft-n-max", "4", "--spec-draft-type-k", "f32",
                        "--spec-draft-type-v", "f32", "-td", "1"],
        "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1",
                         "--spec-ngram-simple-size-m", "4"],
    }
    rows = {}
    for name, extra in configs.items():
        body = BODY if name != "ngram-simple" else {**BODY, "n_predict": 24}
        with Server(args.server_bin, ["-m", str(args.gguf), *extra]) as server:
            rows[name] = (body["n_predict"], *probability_counts(server, body))
    print("tokens:probability entries per streamed message, then in the unstreamed response")
    bad = False
    for name, (n, streamed, whole, drafted, accepted) in rows.items():
        print(f"{name}: drafts {drafted}, accepted {accepted}")
        print(f"  expected: every token with its entry, {n}:{n} in all, streamed and not")
        print(f"  observed: streamed {' '.join(f'{t}:{p}' for t, p in streamed)}; "
              f"unstreamed {whole[0]}:{whole[1]}")
        ok = (all(t == p for t, p in streamed) and sum(t for t, _ in streamed) == n
              and whole == (n, n))
        if not ok and name == "no speculation":
            cannot_run("the server without speculation already misses probabilities")
        bad |= not ok
    print(f"unstreamed logprobs of the 6 tokens: without speculation {LOGPROBS[0]}, with the "
          f"draft model {LOGPROBS[1]}")
    values_differ = len(LOGPROBS[0]) != len(LOGPROBS[1]) or any(
        abs(a - b) > 1e-3 for a, b in zip(LOGPROBS[0], LOGPROBS[1], strict=False))
    if values_differ:
        print("  (the draft model's unstreamed logprobs are not the target's: expected equal, "
              "the tokens being the same)")
    bad |= values_differ
    if not bad:
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
