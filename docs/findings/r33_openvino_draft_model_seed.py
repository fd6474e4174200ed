"""Report 33: OpenVINO GenAI, speculative decoding with a draft model: a seeded request's last
token varies from run to run on a pipeline that has served requests before.

`ContinuousBatchingPipeline(..., {"draft_model": openvino_genai.draft_model(...)})`, target the
`tiny` preset and draft `tiny-draft` (its first two layers), fp32. One sampled request
(`do_sample`, temperature 1, `rng_seed=0`, `max_new_tokens=6`, `num_assistant_tokens=3`,
`ignore_eos`, prompt `[244]`) is served alone, to completion, again and again on one pipeline.
The first time, and on every fresh pipeline, it gives the same six tokens; later times the
sixth token varies, in no fixed order (the same sequence of requests gives other tokens in
another process, with one inference thread too). Without speculation, or with prompt lookup,
the repeats are all equal.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny` and
`tiny-draft` presets as plain transformers checkpoints under DIR/<preset>/. The script
converts each with OpenVINO's documented route, `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` (optimum-intel), into IR-DIR/<preset>/
(default DIR/openvino-ir/), once. optimum-intel must be importable: in the venv of `bash
ci/openvino-env.sh` it is the layer in <venv>/optimum-export, which the script puts on the
exporter's PYTHONPATH itself; OPTIMUM_EXPORT_PATH names another folder. An IR converted
elsewhere can be given with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r33_openvino_draft_model_seed.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 33,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny", "tiny-draft"],
    "workaround": "engines/adapters/openvino/variants.py: openvino_draft_model declares seeds",
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai#4190 (open), may share the "
                "cause; #4476 (open))",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: speculative decoding with a draft model makes a seeded request's last "
         "token vary on a pipeline that served requests before")


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


DEVICE = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def pipeline(target: Path, draft: Path | None, lookup: bool = False):
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 128, 8
    extra: dict = {}
    if draft is not None:
        extra["draft_model"] = ov_genai.draft_model(str(draft), "CPU", **DEVICE)
    if lookup:
        extra["prompt_lookup"] = True
    return ov_genai.ContinuousBatchingPipeline(str(target), sc, "CPU", {**DEVICE, **extra})


def seeded(speculative: bool, lookup: bool = False):
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.ignore_eos = 6, True
    gc.set_eos_token_id(0)
    gc.do_sample, gc.temperature, gc.rng_seed = True, 1.0, 0
    if speculative:
        gc.num_assistant_tokens = 3
    if lookup:
        gc.max_ngram_size = 2
    return gc


def serve(pipe, prompt: list[int], gc) -> list[int]:
    import numpy as np
    import openvino as ov

    h = pipe.add_request(0, ov.Tensor(np.array([prompt], dtype=np.int64)), gc)
    out: list[int] = []
    while pipe.has_non_finished_requests():
        pipe.step()
        while h.can_read():
            for seq in h.read().values():
                out += [int(t) for t in seq.generated_ids]
    return out


PROMPT, REPEATS = [244], 16


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 33: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        target = convert(args.model_dir, args.ir_dir, "tiny")
        draft = convert(args.model_dir, args.ir_dir, "tiny-draft")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    fresh = [serve(pipeline(target, draft), PROMPT, seeded(True)) for _ in range(3)]
    pipe = pipeline(target, draft)
    runs = [serve(pipe, PROMPT, seeded(True)) for _ in range(REPEATS)]
    print(f"prompt {PROMPT}, do_sample, temperature 1, rng_seed 0, 6 tokens, draft model, "
          f"num_assistant_tokens 3; first on 3 fresh pipelines: {fresh}")
    print(f"expected: {REPEATS} runs on one pipeline, one after another, all {runs[0]}")
    print(f"observed: their last tokens {[r[-1] for r in runs]}; "
          f"{len({tuple(r) for r in runs})} distinct outputs")
    for name, draft_model, lookup in (("no speculation", None, False),
                                      ("prompt lookup", None, True)):
        p = pipeline(target, draft_model, lookup)
        c = [serve(p, PROMPT, seeded(lookup, lookup)) for _ in range(6)]
        print(f"control, {name}, 6 runs on one pipeline: "
              f"{'all ' + str(c[0]) if all(x == c[0] for x in c) else c}")
    bad = any(r != runs[0] for r in runs) or any(f != fresh[0] for f in fresh)
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
