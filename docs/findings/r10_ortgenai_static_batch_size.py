"""Report 10: onnxruntime-genai, the static-batch Engine ignores
`engine.static_batching.max_batch_size`.

On the CPU, a model without paged attention runs the `Engine`'s static scheduler. The script
sets `engine.static_batching.max_batch_size` to 1, 2, 8 and 16 (by `Config.overlay`, as the
library documents), checks that `Engine.get_capabilities().configured_max_batch_size` reports
it, submits 11 greedy requests of 3 tokens each at once, and counts the requests that get a
token in each `Engine.run()` call (one decoding step).

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2, whose tokenizer names its
EOS). The script builds the ONNX model with the library's own builder, `python -m
onnxruntime_genai.models.builder -i DIR/tiny -o OUT -p fp32 -e cpu`, into
DIR/ortgenai-<version>/tiny/, once (the builder needs onnx, onnx-ir, torch and transformers
< 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r10_ortgenai_static_batch_size.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 10,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai PR #1580, #1627, PR #2330)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "onnxruntime-genai: the static-batch Engine ignores engine.static_batching.max_batch_size"


class CannotRun(Exception):
    pass


def build(model_dir: Path, preset: str) -> Path:
    """The preset built by onnxruntime_genai.models.builder (fp32, cpu), once per version."""
    import onnxruntime_genai as og

    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ortgenai-{og.__version__}" / preset
    if (out / "genai_config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
           "-o", str(out), "-p", "fp32", "-e", "cpu", "-c", str(out.parent / f".cache-{preset}")]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"the builder failed on {source}: {' | '.join(tail)}")
    return out


def batch_sizes(path: Path, max_batch_size: int) -> tuple[int, list[int]]:
    """The configured batch size the Engine reports, and how many requests each run() served."""
    import numpy as np
    import onnxruntime_genai as og

    config = og.Config(str(path))
    config.overlay(json.dumps({"engine": {"static_batching": {"max_batch_size":
                                                              max_batch_size}}}))
    engine = og.Engine(og.Model(config))
    reported = engine.get_capabilities().configured_max_batch_size
    buffer = engine.create_event_buffer(64)
    requests = []  # a request the caller drops is closed
    for i in range(11):
        req = engine.create_request()
        opts = og.TurnOptions(req)
        opts.set_max_generated_tokens(3)
        opts.set_do_sample(False)
        req.begin_turn(np.array([1 + i, 2 + i, 3 + i], dtype=np.int32), opts)
        requests.append(req)
    sizes = []
    while engine.has_pending_requests():
        served = {id(ev.request) for ev in engine.run(buffer) if ev.token is not None}
        if served:
            sizes.append(len(served))
    return reported, sizes


def expected_sizes(limit: int, n: int = 11, tokens: int = 3) -> list[int]:
    sizes = []
    while n > 0:
        sizes += [min(limit, n)] * tokens
        n -= limit
    return sizes


def runs(sizes: list[int]) -> str:
    """[4, 4, 3] as '4 x2, 3 x1': steps of each batch size, in order."""
    out: list[list[int]] = []
    for s in sizes:
        if out and out[-1][0] == s:
            out[-1][1] += 1
        else:
            out.append([s, 1])
    return ", ".join(f"{s} x{n}" for s, n in out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 10: {TITLE}")
    try:
        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}")
        path = build(args.model_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    wrong = 0
    for limit in (1, 2, 8, 16):
        try:
            reported, sizes = batch_sizes(path, limit)
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            print(f"max_batch_size {limit}: observed: {type(e).__name__}: {e}")
            wrong += 1
            continue
        print(f"max_batch_size {limit} (configured_max_batch_size reports {reported}), "
              f"11 requests of 3 greedy tokens:")
        print(f"  expected: requests per step: {runs(expected_sizes(limit))}")
        print(f"  observed: requests per step: {runs(sizes)}")
        wrong += sizes != expected_sizes(limit)
    print(f"{wrong} of 4 settings wrong")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
