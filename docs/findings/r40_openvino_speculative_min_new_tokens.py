"""Report 40: OpenVINO GenAI, under speculative decoding (prompt lookup, draft model) a stop id
is accepted before min_new_tokens.

`ContinuousBatchingPipeline`, greedy, a stop id (`set_eos_token_id` and `stop_token_ids`) and
`min_new_tokens`: without speculation the stop id is masked until `min_new_tokens` tokens are
out; with prompt lookup (`prompt_lookup=True`) a drafted stop id is accepted and ends the
request early, and the same with a draft model (`tiny-draft`, the `tiny` preset's first two
layers).

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny` and
`tiny-draft` presets as plain transformers checkpoints under DIR/<preset>/. The script
converts each with OpenVINO's documented route, `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` (optimum-intel), into IR-DIR/<preset>/
(default DIR/openvino-ir/), once. optimum-intel must be importable: in the venv of `bash
ci/openvino-env.sh` it is the layer in <venv>/optimum-export, which the script puts on the
exporter's PYTHONPATH itself; OPTIMUM_EXPORT_PATH names another folder. An IR converted
elsewhere can be given with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r40_openvino_speculative_min_new_tokens.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 40,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny", "tiny-draft"],
    "workaround": "engines/adapters/openvino/speculation.py: the speculating variants do not "
                  "declare min_tokens",
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai PR #1719, PR #1417)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: under speculative decoding (prompt lookup, draft model), a stop id is "
         "accepted before min_new_tokens")


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


def pipeline(target: Path, kind: str | None, draft: Path | None = None):
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 128, 8
    extra: dict = {}
    if kind == "draft":
        extra["draft_model"] = ov_genai.draft_model(str(draft), "CPU", **DEVICE)
    if kind == "lookup":
        extra["prompt_lookup"] = True
    return ov_genai.ContinuousBatchingPipeline(str(target), sc, "CPU", {**DEVICE, **extra})


def greedy(pipe, kind: str | None, prompt: list[int], n: int, stop: int, min_new: int,
           penalty: float) -> tuple[list[int], str]:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.do_sample, gc.ignore_eos = n, False, False
    gc.set_eos_token_id(stop)
    gc.stop_token_ids = {stop}
    gc.min_new_tokens = min_new
    if penalty != 1.0:
        gc.repetition_penalty = penalty
    if kind:
        gc.num_assistant_tokens = 3
    if kind == "lookup":
        gc.max_ngram_size = 2
    h = pipe.add_request(0, ov.Tensor(np.array([prompt], dtype=np.int64)), gc)
    out: list[int] = []
    finish = "none"
    while pipe.has_non_finished_requests():
        pipe.step()
        while h.can_read():
            for seq in h.read().values():
                out += [int(t) for t in seq.generated_ids]
                r = str(seq.finish_reason).rsplit(".", 1)[-1]
                finish = r if r != "NONE" else finish
    return out, finish


LOOKUP_PROMPT = [928, 520, 0] + [415] * 8
DRAFT_PROMPT = [788, 861, 82, 530, 995, 829, 621, 976, 733, 447, 285, 577, 286, 194, 513, 300,
                0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 40: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        target = convert(args.model_dir, args.ir_dir, "tiny")
        draft = convert(args.model_dir, args.ir_dir, "tiny-draft")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    bad = 0
    # (kind, prompt, max_new_tokens, stop id, min_new_tokens, repetition_penalty)
    for kind, prompt, n, stop, min_new, penalty in (
            ("lookup", LOOKUP_PROMPT, 6, 415, 4, 0.7),
            ("draft", DRAFT_PROMPT, 3, 477, 3, 1.0)):
        plain = greedy(pipeline(target, None), None, prompt, n, stop, min_new, penalty)
        spec = greedy(pipeline(target, kind, draft), kind, prompt, n, stop, min_new, penalty)
        name = "prompt lookup" if kind == "lookup" else "draft model"
        print(f"{name}: prompt {prompt}, greedy, max_new_tokens {n}, stop id {stop}, "
              f"min_new_tokens {min_new}, repetition_penalty {penalty}")
        print(f"  expected: {plain[0]} {plain[1]} (without speculation: {stop} held back "
              f"until {min_new} tokens are out)")
        print(f"  observed: {spec[0]} {spec[1]}")
        early = stop in spec[0][:min_new]
        bad += early or spec != plain
    for penalty, min_new in ((1.0, 4), (0.7, 0)):
        a = greedy(pipeline(target, None), None, LOOKUP_PROMPT, 6, 415, min_new, penalty)
        b = greedy(pipeline(target, "lookup"), "lookup", LOOKUP_PROMPT, 6, 415, min_new,
                   penalty)
        print(f"control, prompt lookup, repetition_penalty {penalty}, min_new_tokens {min_new}: "
              f"{b[0]} {b[1]}, without speculation {a[0]} {a[1]}")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
