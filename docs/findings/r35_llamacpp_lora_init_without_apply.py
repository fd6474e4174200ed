"""Report 35: llama-server, `--lora-init-without-apply` leaves every adapter at scale 1 for
requests that name none.

Standalone: the standard library only (urllib); it starts llama-server on 127.0.0.1 itself.
Two servers over the `tiny` preset (F32, F32 KV cache, no flash attention, one thread): one
without adapters (the base model), one with the adapters loaded by `--lora FILE ...
--lora-init-without-apply`. On the second: `GET /lora-adapters`, then the greedy request
`{"prompt": [1, 2, 3, 4], "n_predict": 8, "temperature": 0}` without `lora`, and with every
adapter at scale 0.

The GGUF files are the project's presets converted by llama.cpp's own convert_hf_to_gguf.py,
through the project's wrapper (which only replaces the vocabulary: the presets have no real
tokenizer, and the converter refuses one it does not know; llama.cpp's "test" vocabulary, a
bare token list, stands in). With SRC the llama.cpp tree llama-server was built from
(`bash ci/llama-server-env.sh` keeps it as ~/.cache/batching-engines/llama-server-0.3.36/src)
and DIR the folder of `python -m engines.findings models DIR`, in this project's venv:

    python -m engines.adapters.http.gguf_convert SRC DIR/tiny tiny.gguf

The LoRA adapters are the project's zoo adapters of the `tiny` preset (PEFT folders made by
`engines.loras.zoo_loras("tiny", 3, seed=0)` in this project's venv), converted by llama.cpp's
own convert_lora_to_gguf.py:

    python SRC/convert_lora_to_gguf.py --base DIR/tiny --outtype f32 --outfile a.gguf PEFT_A

    python docs/findings/r35_llamacpp_lora_init_without_apply.py --server-bin BIN \
        --gguf tiny.gguf --lora a.gguf --lora b.gguf

(BIN: the last stdout line of `bash ci/llama-server-env.sh`.)
Exit 1: a request without `lora` is not the base model's (the bug); 0: it is; 2: cannot run.
"""

LEDGER = {
    "report": 35,
    "library": "llama.cpp",
    "venv": "llama-server",
    "presets": ["tiny"],
    "workaround": "engines/adapters/http/llama_variants.py: adapters are loaded with "
                  "--lora-scaled FILE:0, not --lora-init-without-apply",
    "args": ["--server-bin", "{server}", "--gguf", "{gguf:tiny}", "--lora", "{lora:tiny:0}",
             "--lora", "{lora:tiny:1}"],
    "upstream": "duplicate of ggml-org/llama.cpp#28674 (open); fix in PR #28707 (open); not filed "
                "again",
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

TITLE = ("report 35: llama-server, --lora-init-without-apply leaves every adapter at scale 1 "
         "for requests that name none")
BODY = {"prompt": [1, 2, 3, 4], "n_predict": 8, "temperature": 0, "return_tokens": True}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-bin", type=Path, help="llama-server")
    parser.add_argument("--model-dir", type=Path,
                        help="accepted for a uniform call; unused: the model files are GGUF "
                             "files given below")
    parser.add_argument("--gguf", type=Path, help="the tiny preset as GGUF")
    parser.add_argument("--lora", type=Path, action="append",
                        help="a GGUF LoRA adapter of the tiny preset (one or more)")
    args = parser.parse_args()
    print(TITLE)
    if not args.server_bin:
        cannot_run("missing --server-bin (see the docstring for how to make it)")
    if not args.gguf:
        cannot_run("missing --gguf (see the docstring for how to make it)")
    if not args.lora:
        cannot_run("missing --lora (see the docstring for how to make it)")
    for path in (args.server_bin, args.gguf, *args.lora):
        if not path.is_file():
            cannot_run(f"no file {path}")
    print(f"llama-server {server_version(args.server_bin)}")
    with Server(args.server_bin, ["-m", str(args.gguf)]) as server:
        base = server.post("/completion", BODY)["tokens"]
    loras = [a for path in args.lora for a in ("--lora", str(path))]
    with Server(args.server_bin, ["-m", str(args.gguf), *loras,
                                 "--lora-init-without-apply"]) as server:
        listed = [(a.get("id"), a.get("scale")) for a in server.get("/lora-adapters")]
        plain = server.post("/completion", BODY)["tokens"]
        zero = [{"id": i, "scale": 0.0} for i in range(len(args.lora))]
        explicit = server.post("/completion", {**BODY, "lora": zero})["tokens"]
    print(f"GET /lora-adapters (id, scale): {listed}; expected every scale 0")
    print(f"expected (the base model, a server without adapters): {base}")
    print(f"observed: without `lora`: {plain}")
    print(f"          with every adapter at scale 0: {explicit}")
    if plain == base:
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
