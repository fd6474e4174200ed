"""Report 39: OpenVINO GenAI, speculative decoding with a draft model gives a sampled request
the draft model's greedy tokens when its filters leave one token.

`ContinuousBatchingPipeline` with `draft_model` (target the `tiny` preset, draft `tiny-draft`,
its first two layers), `num_assistant_tokens=3`. A sampled request (temperature 1.5) whose
`top_p=1e-6` or `top_k=1` leaves the target one candidate a step must get the target's greedy
tokens: speculative sampling accepts a draft token x with probability min(1, p(x) / q(x))
under the target's processed distribution p, 0 for every token but the target's top one. It
gets the draft model's greedy continuation instead, for every seed. Without speculation and
with prompt lookup it gets the target's greedy tokens.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny` and
`tiny-draft` presets as plain transformers checkpoints under DIR/<preset>/. The script
converts each with OpenVINO's documented route, `optimum-cli export openvino --task
text-generation-with-past --weight-format fp32` (optimum-intel), into IR-DIR/<preset>/
(default DIR/openvino-ir/), once. optimum-intel must be importable: in the venv of `bash
ci/openvino-env.sh` it is the layer in <venv>/optimum-export, which the script puts on the
exporter's PYTHONPATH itself; OPTIMUM_EXPORT_PATH names another folder. An IR converted
elsewhere can be given with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r39_openvino_draft_model_filters.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 39,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny", "tiny-draft"],
    "workaround": "engines/adapters/openvino/variants.py: openvino_draft_model declares "
                  "greedy_filters",
    "upstream": "not filed (nearest: openvinotoolkit/openvino.genai#4190 (open), likely the same "
                "defect; the repro worth adding there)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: speculative decoding with a draft model gives a sampled request the "
         "draft model's greedy tokens when its filters leave one token")


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


def pipeline(target: Path, draft: Path | None = None, lookup: bool = False):
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 128, 8
    extra: dict = {}
    if draft is not None:
        extra["draft_model"] = ov_genai.draft_model(str(draft), "CPU", **DEVICE)
    if lookup:
        extra["prompt_lookup"] = True
    return ov_genai.ContinuousBatchingPipeline(str(target), sc, "CPU", {**DEVICE, **extra})


def config(n: int, speculative: str | None, seed: int | None = None, **filters):
    """Greedy when seed is None, else sampled at temperature 1.5 with the filters."""
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.ignore_eos = n, True
    gc.set_eos_token_id(0)
    if speculative:
        gc.num_assistant_tokens = 3
    if speculative == "lookup":
        gc.max_ngram_size = 2
    if seed is None:
        gc.do_sample = False
    else:
        gc.do_sample, gc.temperature, gc.rng_seed = True, 1.5, seed
        for k, v in filters.items():
            setattr(gc, k, v)
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


PROMPT, N = [640, 3, 199, 77, 512], 8
FILTERS = ({"top_p": 1e-6}, {"top_k": 1})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 39: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        target = convert(args.model_dir, args.ir_dir, "tiny")
        draft = convert(args.model_dir, args.ir_dir, "tiny-draft")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    greedy = serve(pipeline(target), PROMPT, config(N, None))
    # the draft model's own greedy continuation of the prompt and the target's first token
    drafts = serve(pipeline(draft), PROMPT + greedy[:1], config(N - 1, None))
    print(f"prompt {PROMPT}, {N} tokens; target greedy {greedy}; the draft model's greedy "
          f"continuation after {greedy[0]}: {drafts}")
    bad = 0
    for name, pipe_args, spec in (("no speculation", {}, None),
                                  ("prompt lookup", {"lookup": True}, "lookup"),
                                  ("draft model", {"draft": draft}, "draft")):
        pipe = pipeline(target, **pipe_args)
        g = serve(pipe, PROMPT, config(N, spec))
        sampled = {(tuple(f), seed): serve(pipe, PROMPT, config(N, spec, seed, **f))
                   for f in FILTERS for seed in range(4)}
        wrong = {k: v for k, v in sampled.items() if v != greedy}
        print(f"{name}: greedy {g}{' (right)' if g == greedy else ''}")
        print(f"  expected: temperature 1.5 with top_p=1e-6 or top_k=1, rng_seed 0-3: {greedy}")
        outs = sorted({tuple(v) for v in sampled.values()})
        print(f"  observed: {[list(o) for o in outs]} ({len(sampled) - len(wrong)} of "
              f"{len(sampled)} right)")
        if any(list(o[1:]) == drafts for o in outs):
            print("  = the target's first token, then the draft model's greedy tokens")
        bad += len(wrong)
    # Informational (not in RESULT): no filter, temperature 0.05, 64 seeds; how often the
    # second token is the target's greedy one, without speculation and with the draft model.
    counts = {}
    for name, pipe_args, spec in (("no speculation", {}, None),
                                  ("draft model", {"draft": draft}, "draft")):
        pipe = pipeline(target, **pipe_args)
        seconds = []
        for seed in range(64):
            gc = config(4, spec, seed)
            gc.temperature = 0.05
            seconds.append(serve(pipe, PROMPT, gc)[1])
        counts[name] = (seconds.count(greedy[1]), seconds.count(drafts[0]))
    print("no filter, temperature 0.05, 64 seeds: second token the target's greedy "
          f"{greedy[1]} / the draft's {drafts[0]}: without speculation "
          f"{counts['no speculation'][0]} / {counts['no speculation'][1]}, with the draft model "
          f"{counts['draft model'][0]} / {counts['draft model'][1]}")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
