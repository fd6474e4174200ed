"""Report 44: llama.cpp grammars, a character of U+0080..U+FFFF may be generated as an
overlong UTF-8 encoding.

Standalone: the standard library only (urllib); it starts llama-server on 127.0.0.1 itself
(F32, F32 KV cache, no flash attention, one thread, 4 slots) and uses the server's `grammar`
option. It reads the vocabulary from the GGUF file's header to find the single-byte tokens,
then asks for a grammar's character while biasing (+100) the byte tokens of one of its
overlong encodings, so that the model takes them wherever the grammar allows:
- `root ::= "✨" | "🚀"` (✨ is E2 9C A8) with the bytes F0 82 9C A8, prompt [47, 0, 0];
- `root ::= "é" | "\u0800"` (é is C3 A9; U+0800 is E0 A0 80) with the bytes E0 83 A9, prompt
  [1];
- `root ::= "é"` with the same bytes: a control, where no alternative starts with E0.
Greedy, `n_predict` 4, `return_tokens`.

The GGUF file is the `tiny` preset with the presets' byte-level BPE as its vocabulary
(llama.cpp's "gpt2" type, `<|endoftext|>` its EOS), converted by llama.cpp's own
convert_hf_to_gguf.py through the project's wrapper (which writes that vocabulary; the
converter refuses a BPE it does not know). With SRC the llama.cpp tree llama-server was built
from (`bash ci/llama-server-env.sh` keeps it as
~/.cache/batching-engines/llama-server-0.3.36/src) and DIR the folder of
`python -m engines.findings models DIR` (whose tiny/ holds the BPE's tokenizer.json), in
this project's venv:

    python -m engines.adapters.http.gguf_convert SRC DIR/tiny tiny-bpe.gguf DIR/tiny

    python docs/findings/r44_llamacpp_grammar_overlong_utf8.py --server-bin BIN \
        --gguf tiny-bpe.gguf

(BIN: the last stdout line of `bash ci/llama-server-env.sh`.)
Exit 1: a grammar accepted an overlong encoding (the bug); 0: none did; 2: cannot run.
(The control is expected to pass either way: the sampler's guard refuses a lead byte whose
shortest sequences no alternative needs.)
"""

LEDGER = {
    "report": 44,
    "library": "llama.cpp",
    "venv": "llama-server",
    "presets": ["tiny"],
    "workaround": None,
    "args": ["--server-bin", "{server}", "--gguf", "{gguf-bpe:tiny}"],
    "upstream": "not filed (nearest: ggml-org/llama.cpp PR #2553, merged: the partial UTF-8 "
                "matching)",
}

import argparse  # noqa: E402
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

TITLE = ("report 44: llama.cpp grammars, a character of U+0080..U+FFFF may be generated as an "
         "overlong UTF-8 encoding")
CASES = [  # (grammar, its strings, the overlong bytes biased, prompt)
    ('root ::= "\u2728" | "\U0001f680"', ("\u2728", "\U0001f680"), b"\xf0\x82\x9c\xa8",
     [47, 0, 0]),
    ('root ::= "\u00e9" | "\u0800"', ("\u00e9", "\u0800"), b"\xe0\x83\xa9", [1]),
    # A control: without a character whose encoding starts with E0, E0 itself is refused.
    ('root ::= "\u00e9"', ("\u00e9",), b"\xe0\x83\xa9", [1]),
]

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
    single = {b[0]: i for i, b in enumerate(spelled) if b is not None and len(b) == 1}
    print(f"llama-server {server_version(args.server_bin)}")
    bad = False
    with Server(args.server_bin, ["-m", str(args.gguf)]) as server:
        for grammar, strings, overlong, prompt in CASES:
            if any(b not in single for b in overlong):
                cannot_run(f"no single-byte token for every byte of {overlong.hex(' ')}")
            bias = [[single[b], 100] for b in overlong]
            out = server.post("/completion", {
                "prompt": prompt, "n_predict": 4, "temperature": 0, "grammar": grammar,
                "logit_bias": bias, "return_tokens": True})
            tokens = out.get("tokens") or []
            data = b"".join(spelled[t] or b"?" for t in tokens)
            valid = [s.encode() for s in strings]
            ok = any(v.startswith(data) or data.startswith(v) for v in valid)
            print(f"grammar {grammar}: biased byte tokens {[i for i, _ in bias]} "
                  f"({overlong.hex(' ')})")
            print(f"  expected: bytes of {' or '.join(v.hex(' ') for v in valid)} "
                  "(valid UTF-8)")
            print(f"  observed: tokens {tokens}, bytes {data.hex(' ')}, "
                  f"content {out.get('content')!r}")
            bad |= not ok
    if not bad:
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
