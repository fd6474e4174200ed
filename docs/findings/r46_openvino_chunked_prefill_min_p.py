"""Report 46: OpenVINO GenAI, with top_k, min_p and min_new_tokens over stop ids, a seeded
request samples another token when its prompt is prefilled in chunks.

`ContinuousBatchingPipeline` with dynamic split-fuse (the default): the same seeded request
(prompt [230, 5, 199, 392], temperature 1, top_k 40, min_p 0.3, min_new_tokens 1, stop ids
{67, 79}, rng_seed 328, 5 new tokens) alone on fresh pipelines whose `max_num_batched_tokens`
is 16 (the prompt in one step), 3 (3 tokens, then 1) and 2 (2 + 2). The 3 + 1 split gives
other tokens. Any one of min_p 0, top_k off, min_new_tokens 0 or no stop ids makes the splits
agree.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny`
preset as a plain transformers checkpoint under DIR/tiny/. The script converts it with
OpenVINO's documented route, `optimum-cli export openvino --task text-generation-with-past
--weight-format fp32` (optimum-intel), into IR-DIR/tiny/ (default DIR/openvino-ir/), once.
optimum-intel must be importable: in the venv of `bash ci/openvino-env.sh` it is the layer in
<venv>/optimum-export, which the script puts on the exporter's PYTHONPATH itself;
OPTIMUM_EXPORT_PATH names another folder. An IR converted elsewhere can be given with
--ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r46_openvino_chunked_prefill_min_p.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 46,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai PR #2360)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: with top_k, min_p and min_new_tokens over stop ids, a seeded request "
         "samples another token when its prompt is prefilled in chunks")


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


PROMPT = [230, 5, 199, 392]
REQUEST = {"top_k": 40, "min_p": 0.3, "min_new_tokens": 1, "stops": (67, 79), "seed": 328}


def sample(ir: Path, budget: int, top_k: int, min_p: float, min_new_tokens: int,
           stops: tuple[int, ...], seed: int) -> list[int]:
    """The request alone on a fresh pipeline of that token budget; its tokens."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 128, 8
    sc.dynamic_split_fuse, sc.max_num_batched_tokens = True, budget
    pipe = ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.do_sample, gc.temperature, gc.rng_seed = 5, True, 1.0, seed
    if stops:
        gc.ignore_eos = False
        gc.set_eos_token_id(stops[0])
        gc.stop_token_ids = set(stops)
        gc.min_new_tokens = min_new_tokens
    else:
        gc.ignore_eos = True
        gc.set_eos_token_id(0)
    if top_k:
        gc.top_k = top_k
    if min_p:
        gc.min_p = min_p
    h = pipe.add_request(0, ov.Tensor(np.array([PROMPT], dtype=np.int64)), gc)
    out: list[int] = []
    while pipe.has_non_finished_requests():
        pipe.step()
        while h.can_read():
            for seq in h.read().values():
                out += [int(t) for t in seq.generated_ids]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 46: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    by_budget = {b: sample(ir, b, **REQUEST) for b in (16, 3, 2)}
    print(f"prompt {PROMPT}, do_sample, temperature 1, top_k 40, min_p 0.3, min_new_tokens 1, "
          "stop ids {67, 79}, rng_seed 328, max_new_tokens 5, alone on fresh pipelines:")
    print(f"expected: the same tokens at every budget, {by_budget[16]} (budget 16: one step)")
    print(f"observed: budget 16 {by_budget[16]}, budget 3 (3 + 1) {by_budget[3]}, "
          f"budget 2 (2 + 2) {by_budget[2]}")
    for name, change in (("min_p 0", {"min_p": 0.0}), ("top_k off", {"top_k": 0}),
                         ("min_new_tokens 0", {"min_new_tokens": 0}), ("no stop ids",
                                                                        {"stops": ()})):
        r = {b: sample(ir, b, **{**REQUEST, **change}) for b in (16, 3)}
        print(f"control, {name}: budget 16 {r[16]}, budget 3 {r[3]}"
              f"{' (equal)' if r[16] == r[3] else ''}")
    seeds = [s for s in range(40) if sample(ir, 16, **{**REQUEST, "seed": s})
             != sample(ir, 3, **{**REQUEST, "seed": s})]
    print(f"rng_seed 0-39: budgets 16 and 3 differ for {len(seeds)} of 40 ({seeds})")
    bad = len({tuple(v) for v in by_budget.values()}) > 1 or bool(seeds)
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
