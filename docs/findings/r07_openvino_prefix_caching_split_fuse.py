"""Report 7: OpenVINO GenAI, prefix caching under a split-fuse budget gives wrong greedy tokens.

`ContinuousBatchingPipeline` with `enable_prefix_caching=True`, `dynamic_split_fuse=True` and
`max_num_batched_tokens=16`: a one-token request is added, then, one to three `step()`s
later, three identical greedy requests of an 8-token prompt that starts with that token. Two
of the three generate other tokens than the same prompt alone on a fresh pipeline of the
same configuration. The script runs the reported case and the wider ones that were measured:
a non-repeating prompt, arrival after 1, 2 or 3 steps, and a Llama checkpoint.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2, and `tiny-llama-rope`, a
Llama). The script converts each with OpenVINO's documented route, `optimum-cli export
openvino --task text-generation-with-past --weight-format fp32` (optimum-intel), into
IR-DIR/<preset>/ (default DIR/openvino-ir/), once. optimum-intel must be importable: in the
venv of `bash ci/openvino-env.sh` it is the layer in <venv>/optimum-export (optimum-intel
2.2.0 with transformers 5.5.4), which the script puts on the exporter's PYTHONPATH itself;
OPTIMUM_EXPORT_PATH names another folder. An IR converted elsewhere can be given with
--ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r07_openvino_prefix_caching_split_fuse.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 7,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny", "tiny-llama-rope"],
    "workaround": "engines/adapters/openvino/variants.py: openvino_split_fuse keeps prefix "
                  "caching off",
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai#4047, #4367 (open); different)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "OpenVINO GenAI: prefix caching under a split-fuse budget gives wrong greedy tokens"


class CannotRun(Exception):
    pass


def convert(model_dir: Path, ir_root: Path | None, preset: str) -> Path:
    """The preset's IR, exported once with optimum-cli (see the docstring)."""
    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = (ir_root or model_dir / "openvino-ir") / preset
    if (out / "openvino_model.xml").is_file():
        return out
    layer = os.environ.get("OPTIMUM_EXPORT_PATH") or str(Path(sys.prefix) / "optimum-export")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    if Path(layer).is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [layer, env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "openvino",
           "--model", str(source), "--task", "text-generation-with-past",
           "--weight-format", "fp32", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "openvino_model.xml").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"optimum-cli export openvino failed on {source}: {' | '.join(tail)}")
    return out


def run(ir: Path, arrivals: dict[int, list[tuple[int, list[int], int]]],
        prefix_caching: bool = True) -> dict[int, list[int]]:
    """Serve greedy requests (id, prompt, max_new_tokens), each added after as many `step()`s
    as its key says, on a fresh pipeline; each request's generated ids."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 16, 8
    sc.dynamic_split_fuse, sc.max_num_batched_tokens = True, 16
    sc.enable_prefix_caching = prefix_caching
    pipe = ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    handles, out = {}, {}
    step = 0
    while True:
        for rid, prompt, n in arrivals.get(step, []):
            gc = ov_genai.GenerationConfig()
            gc.max_new_tokens, gc.ignore_eos, gc.do_sample = n, True, False
            ids = ov.Tensor(np.array([prompt], dtype=np.int64))
            handles[rid] = pipe.add_request(rid, ids, gc)
            out[rid] = []
        if not pipe.has_non_finished_requests() and step > max(arrivals):
            break
        pipe.step()
        step += 1
        for rid, h in handles.items():
            while h.can_read():
                for seq in h.read().values():
                    out[rid] += [int(t) for t in seq.generated_ids]
    return out


def case(ir: Path, prompt: list[int], arrive: int,
         prefix_caching: bool = True) -> tuple[list[int], list[list[int]]]:
    """Expected (the prompt alone, fresh pipeline) and what each of three copies gets when
    they arrive `arrive` steps after a one-token request of the prompt's first token."""
    alone = run(ir, {0: [(1, prompt, 6)]}, prefix_caching)[1]
    got = run(ir, {0: [(9, prompt[:1], 1)], arrive: [(i, prompt, 6) for i in (1, 2, 3)]},
              prefix_caching)
    return alone, [got[i] for i in (1, 2, 3)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 7: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        cases = [("tiny", [0] * 8, 2), ("tiny", [0] * 8, 1), ("tiny", [0] * 8, 3),
                 ("tiny", NON_REPEATING, 2), ("tiny-llama-rope", [0] * 8, 2)]
        irs = {p: convert(args.model_dir, args.ir_dir, p) for p in {c[0] for c in cases}}
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    wrong = 0
    for preset, prompt, arrive in cases:
        try:
            alone, three = case(irs[preset], prompt, arrive)
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            print(f"{preset}, prompt {prompt}, arriving after {arrive} steps: "
                  f"observed: {type(e).__name__}: {e}")
            wrong += 1
            continue
        print(f"{preset}, prompt {prompt}, three copies arriving {arrive} step(s) after a "
              f"request of prompt {prompt[:1]}:")
        print(f"  expected: {[alone] * 3} (each as alone on a fresh pipeline)")
        print(f"  observed: {three}")
        wrong += any(t != alone for t in three)
    alone, three = case(irs["tiny"], [0] * 8, 2, prefix_caching=False)
    print(f"control, the first case with prefix caching off: {three} "
          f"({'right' if all(t == alone for t in three) else 'wrong too'})")
    print(f"{wrong} of {len(cases)} cases wrong")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


NON_REPEATING = [0, 1, 2, 3, 4, 5, 6, 7]

if __name__ == "__main__":
    sys.exit(main())
