"""Report 48: onnxruntime-genai, a model with fewer KV heads than heads, built at fp16 for
the CPU, fails its first decoding step: the builder's repeat_kv annotates the past-plus-new
keys and values with `sequence_length`.

The tiny preset (Qwen2, 2 heads, 1 KV head) built by the library's own builder, `-p fp16 -e
cpu`. At fp16 on the CPU the builder uses MultiHeadAttention, not GroupQueryAttention, and
repeats the KV heads in the graph (`make_repeat_kv`): the keys and values after the Concat
with the past have `total_sequence_length` positions, but the builder's value_info for the
five nodes after it (Unsqueeze_5, Expand, Reshape_3, Transpose_2, Reshape_4) says
`sequence_length`. onnxruntime's allocation planner takes equal dim_params as equal sizes and
plans to reuse a buffer of `sequence_length` positions for one of them (a Cast it inserts in
front of MultiHeadAttention, which has no fp16 CPU kernel). The prompt's forward, where the two
lengths are equal, runs; the first step after it fails.

The script runs the `Generator` (greedy, a 3-token prompt, `max_length` 4 and 8) on the
default build, and the same on a copy of that build whose only change is those value_info
entries reading `total_sequence_length` (the control; made with `onnx`). Expected: both
serve 5 tokens, as the fp32 build of the same checkpoint does (printed beside).

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`). The script builds the ONNX models
with the library's own builder, `python -m onnxruntime_genai.models.builder -i DIR/tiny -o OUT
-p fp16 -e cpu` (and `-p fp32`), under DIR/ortgenai-<version>/, once (the builder needs onnx,
onnx-ir, torch and transformers < 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r48_ortgenai_fp16_cpu_repeat_kv_shapes.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 48,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai#2009 (closed), #1098 (open), "
                "PR #210)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai: a model with fewer KV heads than heads, built at fp16 for the CPU, "
         "fails its first decoding step")
PRESET = "tiny"
PROMPT = [5, 6, 7]
# The nodes of make_repeat_kv whose output holds past + new positions, annotated otherwise.
AFTER_CONCAT = ("Unsqueeze_5", "Expand", "Reshape_3", "Transpose_2", "Reshape_4")


class CannotRun(Exception):
    pass


def build(model_dir: Path, precision: str) -> Path:
    """The preset built by onnxruntime_genai.models.builder (-e cpu) at `precision`, once per
    version."""
    import onnxruntime_genai as og

    source = model_dir / PRESET
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ortgenai-{og.__version__}" / f"{PRESET}-{precision}"
    if (out / "genai_config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
           "-o", str(out), "-p", precision, "-e", "cpu",
           "-c", str(out.parent / f".cache-{out.name}")]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"the builder failed on {source}: {' | '.join(tail)}")
    return out


def annotated(built: Path) -> tuple[Path, list[str]]:
    """A copy of the build whose repeat_kv value_info after the Concat reads
    total_sequence_length where the builder wrote sequence_length; and the names changed."""
    import onnx

    out = built.parent / f"{built.name}-annotated"
    shutil.rmtree(out, ignore_errors=True)
    # A copy, not links: onnxruntime refuses external data outside the model's folder.
    shutil.copytree(built, out)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    changed = []
    for info in model.graph.value_info:
        if "/repeat_kv/" not in info.name or \
                info.name.split("/repeat_kv/")[1].split("/")[0] not in AFTER_CONCAT:
            continue
        for dim in info.type.tensor_type.shape.dim:
            if dim.dim_param == "sequence_length":
                dim.dim_param = "total_sequence_length"
                changed.append(info.name)
    (out / "model.onnx").write_bytes(model.SerializeToString())
    return out, changed


def generate(path: Path, max_length: int) -> list[int] | str:
    """Greedy tokens of the Generator for PROMPT up to max_length, or how it failed."""
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(path)))
    tokens: list[int] = []
    try:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([PROMPT], dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
            tokens.append(int(gen.get_next_tokens()[0]))
        return tokens
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        cause = str(e).split("Status Message: ")[-1].split(". Validate")[0]
        node = str(e).split("Name:'")[-1].split("'")[0] if "Name:'" in str(e) else "?"
        return f"{type(e).__name__} after {tokens} in {node}: {cause.split(' : ')[-1]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 48: {TITLE}")
    try:
        import onnxruntime
        import onnxruntime_genai as og

        print(f"onnxruntime-genai {og.__version__}, onnxruntime {onnxruntime.__version__}")
        fp16 = build(args.model_dir, "fp16")
        fp32 = build(args.model_dir, "fp32")
        control, changed = annotated(fp16)
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    lengths = (len(PROMPT) + 1, len(PROMPT) + 5)
    print(f"Generator, greedy, prompt {PROMPT}, max_length {lengths[0]} (the prompt's forward "
          f"only) and {lengths[1]} (then 4 decoding steps)")
    print(f"  fp32 build: {[generate(fp32, n) for n in lengths]}")
    print("  expected (fp16): 1 and 5 tokens, no error")
    got = [generate(fp16, n) for n in lengths]
    print(f"  observed, fp16 as built: {got}")
    fixed = [generate(control, n) for n in lengths]
    print(f"  observed, fp16 with {len(changed)} repeat_kv annotations reading "
          f"total_sequence_length: {fixed}")
    wrong = any(not isinstance(g, list) for g in got)
    if any(not isinstance(g, list) for g in fixed):
        print("  (the control fails too: not this report's failure)")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
