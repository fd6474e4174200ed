"""Report 49: OpenVINO GenAI, beam search ignores min_new_tokens: a beam ends on a stop id
before min_new_tokens tokens are out.

`ContinuousBatchingPipeline` (the step API: `add_request`, `step`) and `LLMPipeline.generate`,
prompt `[2, 7, 1, 8]`, stop id 959 (`set_eos_token_id` and `stop_token_ids`), the `tiny`
preset (fp32). 959 is the prompt's greedy first token. Greedy with `min_new_tokens=2` holds
959 back (the control); `num_beams=2`, `length_penalty=0` (the score is the cumulative
logprob, so a one-token beam ranks first if allowed) with `min_new_tokens=2` returns the beam
`[959]` alone, one token, ended on the stop id.

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny`
preset as a plain transformers checkpoint under DIR/tiny/. The script converts it with
OpenVINO's documented route, `optimum-cli export openvino --task text-generation-with-past
--weight-format fp32` (optimum-intel), into IR-DIR/tiny/ (default DIR/openvino-ir/), once;
see report 40's script for the exporter's PYTHONPATH. An IR converted elsewhere can be given
with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r49_openvino_beam_min_new_tokens.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 49,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny"],
    "workaround": "engines/adapters/openvino/adapter.py: min_tokens is refused on beams "
                  "(BEAM_MIN_TOKENS, Capabilities.refused_with_beams)",
    "upstream": "not filed (nearest: vllm-project/vllm#47409, the same gap in vLLM's beam "
                "search)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: beam search ignores min_new_tokens (a beam ends on a stop id before "
         "min_new_tokens)")


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
PROMPT = [2, 7, 1, 8]
STOP = 959  # the prompt's greedy first token
MIN_NEW = 2


def config(beams: int, min_new: int):
    import openvino_genai as ov_genai

    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.do_sample, gc.ignore_eos = 4, False, False
    gc.set_eos_token_id(STOP)
    gc.stop_token_ids = {STOP}
    gc.min_new_tokens = min_new
    if beams > 1:
        gc.num_beams, gc.num_return_sequences, gc.length_penalty = beams, beams, 0.0
    return gc


def by_steps(ir: Path, beams: int, min_new: int) -> list[list[int]]:
    """Every returned sequence, best first, from the step API."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 128, 8
    pipe = ov_genai.ContinuousBatchingPipeline(str(ir), sc, "CPU", DEVICE)
    h = pipe.add_request(0, ov.Tensor(np.array([PROMPT], dtype=np.int64)),
                         config(beams, min_new))
    while pipe.has_non_finished_requests():
        pipe.step()
    return [[int(t) for t in r.generated_ids] for r in h.read_all()]


def by_generate(ir: Path, beams: int, min_new: int) -> list[list[int]]:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    pipe = ov_genai.LLMPipeline(str(ir), "CPU", **DEVICE)
    out = pipe.generate(ov.Tensor(np.array([PROMPT], dtype=np.int64)), config(beams, min_new))
    return [[int(t) for t in seq] for seq in out.tokens]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 49: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    print(f"prompt {PROMPT}, stop id {STOP}, max_new_tokens 4; beams: num_beams 2, "
          f"length_penalty 0")
    bad = 0
    for name, run in (("step API", by_steps), ("LLMPipeline.generate", by_generate)):
        for beams in (1, 2):
            for min_new in (0, MIN_NEW):
                seqs = run(ir, beams, min_new)
                # Shorter than min_new_tokens and ended on the stop id: wrong under any count
                # (whether or not the stop id counts towards min_new_tokens).
                early = [s for s in seqs if len(s) < min_new and s[-1:] == [STOP]]
                label = "greedy (control)" if beams == 1 else "num_beams 2"
                print(f"  {name}, {label}, min_new_tokens {min_new}: {seqs}"
                      + (f"  <- {early}: ended on {STOP} before {min_new} tokens" if early else ""))
                bad += bool(early)
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
