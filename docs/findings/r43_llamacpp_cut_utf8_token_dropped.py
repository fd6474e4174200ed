"""Report 43: llama-server, a token whose text ends in a cut UTF-8 character is never
streamed, and its probabilities are dropped streamed or not.

Standalone: the standard library only (urllib); it starts llama-server on 127.0.0.1 itself
(F32, F32 KV cache, no flash attention, one thread, 4 slots). It reads the vocabulary from the
GGUF file's header and picks the first token that spells a complete character and then the
first bytes of another (its bytes end in a cut UTF-8 sequence; in the presets' BPE token 405,
"世" and two of the three bytes of "界"). Then the greedy
request `{"prompt": [1], "n_predict": 2, "temperature": 0, "ignore_eos": true,
"return_tokens": true, "logit_bias": [[THAT_TOKEN, 100]]}` with `"n_probs": 2`, streamed and
not.

The GGUF file is the `tiny` preset with the presets' byte-level BPE as its vocabulary
(llama.cpp's "gpt2" type, `<|endoftext|>` its EOS), converted by llama.cpp's own
convert_hf_to_gguf.py through the project's wrapper (which writes that vocabulary; the
converter refuses a BPE it does not know). With SRC the llama.cpp tree llama-server was built
from (`bash ci/llama-server-env.sh` keeps it as
~/.cache/batching-engines/llama-server-0.3.36/src) and DIR the folder of
`python -m engines.findings models DIR` (whose tiny/ holds the BPE's tokenizer.json), in
this project's venv:

    python -m engines.adapters.http.gguf_convert SRC DIR/tiny tiny-bpe.gguf DIR/tiny

    python docs/findings/r43_llamacpp_cut_utf8_token_dropped.py --server-bin BIN \
        --gguf tiny-bpe.gguf

(BIN: the last stdout line of `bash ci/llama-server-env.sh`.)
Exit 1: a generated token's id or probabilities are missing (the bug); 0: none is; 2: cannot
run.
"""

LEDGER = {
    "report": 43,
    "library": "llama.cpp",
    "venv": "llama-server",
    "presets": ["tiny"],
    "workaround": "engines/adapters/http/llama_variants.py: llama_server_guided sends its "
                  "requests unstreamed and does not declare logprobs",
    "args": ["--server-bin", "{server}", "--gguf", "{gguf-bpe:tiny}"],
    "upstream": "not filed (nearest: ggml-org/llama.cpp PR #4446, merged: the text hold-back)",
}

import argparse  # noqa: E402
import codecs  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, NoReturn  # noqa: E402

TITLE = ("report 43: llama-server, a token whose text ends in a cut UTF-8 character is never "
         "streamed, and its probabilities are dropped")


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


def byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def gguf_tokens(path: Path) -> list[str]:
    """`tokenizer.ggml.tokens` of a GGUF file (read from its header, no library)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with path.open("rb") as f:
        def read(n: int) -> bytes:
            data = f.read(n)
            if len(data) != n:
                raise ValueError(f"{path}: truncated GGUF header")
            return data

        def u32() -> int:
            return int(struct.unpack("<I", read(4))[0])

        def u64() -> int:
            return int(struct.unpack("<Q", read(8))[0])

        def string() -> str:
            return read(u64()).decode("utf-8", errors="surrogateescape")

        def value(kind: int) -> Any:
            if kind == 8:
                return string()
            if kind == 9:
                item, count = u32(), u64()
                return [value(item) for _ in range(count)]
            if kind not in sizes:
                raise ValueError(f"{path}: unknown GGUF value type {kind}")
            return read(sizes[kind])

        if read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        u32()  # version
        u64()  # tensor count
        for _ in range(u64()):
            key, kind = string(), u32()
            found = value(kind)
            if key == "tokenizer.ggml.tokens":
                return list(found)
    raise ValueError(f"{path}: no tokenizer.ggml.tokens")


def token_bytes(vocab: list[str]) -> list[bytes | None]:
    """Each token's bytes under the byte-level alphabet (None: not a byte-level token)."""
    inverse = byte_of_char()
    out: list[bytes | None] = []
    for text in vocab:
        try:
            out.append(bytes(inverse[c] for c in text))
        except KeyError:
            out.append(None)
    return out


def leaves_cut(data: bytes) -> bool:
    """Whether the text `data` spells ends mid-character (valid so far, incomplete)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return decoder.getstate()[0] != b""


def complete_part(data: bytes) -> str:
    """The complete characters at the start of `data` (before a cut one)."""
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", type=Path, help="llama-server")
    parser.add_argument("--model-dir", type=Path,
                        help="accepted for a uniform call; unused: the model files are GGUF "
                             "files given below")
    parser.add_argument("--gguf", type=Path,
                        help="the tiny preset as GGUF with a byte-level BPE vocabulary")
    args = parser.parse_args()
    print(TITLE)
    if not args.server_bin:
        cannot_run("missing --server-bin (see the docstring for how to make it)")
    if not args.gguf:
        cannot_run("missing --gguf (see the docstring for how to make it)")
    for path in (args.server_bin, args.gguf):
        if not path.is_file():
            cannot_run(f"no file {path}")
    try:
        spelled = token_bytes(gguf_tokens(args.gguf))
    except (OSError, ValueError) as e:
        cannot_run(f"cannot read the vocabulary of {args.gguf}: {e}")
    print(f"llama-server {server_version(args.server_bin)}")
    with Server(args.server_bin, ["-m", str(args.gguf)]) as server:
        # A token that spells a whole character and then part of the next (the report's
        # 405, "世" and the first two bytes of "界"), else any token ending mid-character.
        cut_tokens = [t for t, b in enumerate(spelled) if b and leaves_cut(b)]
        whole = [t for t in cut_tokens if complete_part(spelled[t] or b"")]
        cut = (whole or cut_tokens or [None])[0]
        if cut is None:
            cannot_run("no token of this vocabulary ends mid-character")
        body = {"prompt": [1], "n_predict": 2, "temperature": 0, "ignore_eos": True,
                "return_tokens": True, "n_probs": 2, "logit_bias": [[cut, 100]]}
        events = server.stream("/completion", body)
        whole = server.post("/completion", body)
    streamed = [t for e in events for t in (e.get("tokens") or [])]
    streamed_probs = sum(len(e.get("completion_probabilities") or []) for e in events)
    predicted = next((e.get("tokens_predicted") for e in reversed(events)
                      if e.get("tokens_predicted") is not None), None)
    tokens = whole.get("tokens") or []
    probs = len(whole.get("completion_probabilities") or [])
    print(f"token {cut} spells {spelled[cut]!r}: it ends mid-character")
    print(f"expected: streamed ids {tokens} with {len(tokens)} probability entries; "
          f"unstreamed {len(tokens)} entries")
    print(f"observed: streamed ids {streamed} with {streamed_probs} probability entries "
          f"(tokens_predicted {predicted}, {len(events)} messages); unstreamed tokens "
          f"{tokens} with {probs} entries")
    if len(tokens) == 2 and streamed == tokens and streamed_probs == probs == len(tokens):
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
