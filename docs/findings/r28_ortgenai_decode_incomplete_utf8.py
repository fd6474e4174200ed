"""Report 28: onnxruntime-genai, the tokenizer's `decode` and `TokenizerStream` lose the text
after an incomplete UTF-8 sequence.

A byte-level BPE `tokenizer.json` (GPT-2's byte alphabet and `ByteLevel` decoder, as the
model directory's) has a token for every single byte. The script decodes three sequences of
such byte tokens, each with a byte that makes no character (a lead byte 0xE3 without its
continuation, a lone continuation byte 0xA2), with `og.Tokenizer.decode` and, token by token,
with `og.Tokenizer.create_stream().decode`.

Expected: the bytes' text with the bytes that make no character replaced by U+FFFD
(Python's `bytes.decode("utf-8", "replace")`, and what the `tokenizers` library, transformers
and vLLM give), and the stream's pieces joined equal to it.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2, with the byte-level BPE
tokenizer). The script builds the ONNX model with the library's own builder, `python -m
onnxruntime_genai.models.builder -i DIR/tiny -o OUT -p fp32 -e cpu`, into
DIR/ortgenai-<version>/tiny/, once (the builder copies the tokenizer files there; it needs
onnx, onnx-ir, torch and transformers < 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r28_ortgenai_decode_incomplete_utf8.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 28,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai#155, #314; "
                "microsoft/onnxruntime-extensions#931)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai: the tokenizer's decode and TokenizerStream lose the text after an "
         "incomplete UTF-8 sequence")
CASES = [b"\xe3\x81 in", b"\xa2 ou", b"A\xe3 B"]


class CannotRun(Exception):
    pass


def build(model_dir: Path, preset: str, extra: tuple[str, ...] = ()) -> Path:
    """The preset built by onnxruntime_genai.models.builder (fp32, cpu), once per version."""
    import onnxruntime_genai as og

    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ortgenai-{og.__version__}" / "-".join((preset, *extra))
    if (out / "genai_config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
           "-o", str(out), "-p", "fp32", "-e", "cpu",
           "-c", str(out.parent / f".cache-{out.name}")]
    if extra:
        cmd += ["--extra_options", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"the builder failed on {source}: {' | '.join(tail)}")
    return out


def byte_tokens(path: Path) -> dict[int, int]:
    """Each byte's token id in the model directory's byte-level BPE tokenizer.json."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    missing = [b for b in range(256) if chars[b] not in vocab]
    if missing:
        raise CannotRun(f"{path}/tokenizer.json is not a byte-level BPE with every byte "
                        f"(no token for {missing[:5]})")
    return {b: vocab[chars[b]] for b in range(256)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 28: {TITLE}")
    try:
        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}")
        path = build(args.model_dir, "tiny")
        ids = byte_tokens(path)
        tokenizer = og.Tokenizer(og.Model(og.Config(str(path))))
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    wrong = 0
    for data in CASES:
        tokens = [ids[b] for b in data]
        expected = data.decode("utf-8", "replace")
        try:
            whole = tokenizer.decode(tokens)
            stream = tokenizer.create_stream()
            pieces = [stream.decode(t) for t in tokens]
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            whole, pieces = f"{type(e).__name__}: {e}", []
        print(f"bytes {data!r} as byte tokens {tokens}:")
        print(f"  expected: {expected!r}, the stream's pieces joined the same")
        print(f"  observed: decode {whole!r}; stream pieces {pieces} = {''.join(pieces)!r}")
        wrong += whole != expected or "".join(pieces) != expected
    print(f"{wrong} of {len(CASES)} cases wrong")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
