"""Report 29: onnxruntime-genai, guidance sees a token that carries part of a UTF-8 character
as U+FFFD, fails the turn and leaves the Engine unhealthy.

The `Engine` with `TurnOptions.set_guidance` and a byte-level BPE `tokenizer.json` in the
model directory (whose tokens for the bytes 0xC3, 0xA9 and 0xBC spell `é` and `ü` only
together). The script runs, each on a fresh Engine, a greedy turn of 2 tokens under the lark
grammar `start: "é" | "ü"`, then an unguided turn on the same Engine; and the same under the
regex `(你好|世界)` (4 tokens) and, as a control, the lark grammar `start: "ab" | "cd"`.

Expected: the turn is served with `é` or `ü` (the only tokens that fit are 0xC3's, then
0xA9's or 0xBC's), and the next turn too.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2, with the byte-level BPE
tokenizer). The script builds the ONNX model with the library's own builder, `python -m
onnxruntime_genai.models.builder -i DIR/tiny -o OUT -p fp32 -e cpu`, into
DIR/ortgenai-<version>/tiny/, once (the builder copies the tokenizer files there; it needs
onnx, onnx-ir, torch and transformers < 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r29_ortgenai_guidance_partial_utf8.py \\
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 29,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": "engines/adapters/ortgenai/adapter.py: GUIDANCE_LOSES_BYTES, the default "
                  "factory does not declare guided decoding",
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai PR #1870, #2055 (closed), #523)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai: guidance sees a token that carries part of a UTF-8 character as "
         "U+FFFD, fails the turn and leaves the Engine unhealthy")
CASES = [  # (kind, grammar, tokens, the texts that fit, whether the bug's trigger is there)
    ("lark_grammar", 'start: "é" | "ü"', 2, ("é", "ü"), True),
    ("regex", "(你好|世界)", 6, ("你好", "世界"), True),
    ("lark_grammar", 'start: "ab" | "cd"', 2, ("ab", "cd"), False),
]


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


def short(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:200]


def turns(path: Path, kind: str, grammar: str, n: int) -> tuple[str, str]:
    """A guided greedy turn of n tokens on prompt [0], then an unguided one of 2, on one
    Engine: each one's text (the library's decode) or how it failed."""
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(path)))
    tokenizer = og.Tokenizer(model)
    engine = og.Engine(model)
    buffer = engine.create_event_buffer(64)
    out = []
    for guided in (True, False):
        try:
            req = engine.create_request()
            opts = og.TurnOptions(req)
            opts.set_max_generated_tokens(n if guided else 2)
            opts.set_do_sample(False)
            if guided:
                opts.set_guidance(kind, grammar)
            req.begin_turn(np.array([0], dtype=np.int32), opts)
            tokens, failed = [], ""
            while engine.has_pending_requests():
                for ev in engine.run(buffer):
                    if ev.flags & og.EngineEventFlags.FAILED:
                        failed = ev.error_code.name
                    elif ev.token is not None:
                        tokens.append(int(ev.token))
            out.append(failed or repr(tokenizer.decode(tokens)))
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            out.append(f"{type(e).__name__}: {short(e)}")
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 29: {TITLE}")
    try:
        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}")
        path = build(args.model_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    wrong = 0
    for kind, grammar, n, fits, trigger in CASES:
        guided, after = turns(path, kind, grammar, n)
        ok = guided in {repr(t) for t in fits} and not after.startswith(("Runtime", "ENGINE"))
        label = "" if trigger else " (control: no character split across tokens)"
        print(f"{kind} {grammar!r}, {n} tokens, then an unguided turn{label}:")
        print(f"  expected: one of {list(fits)}, then a served turn")
        print(f"  observed: {guided}, then {after}")
        wrong += trigger and not ok
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
