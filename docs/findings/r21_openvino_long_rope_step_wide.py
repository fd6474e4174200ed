"""Report 21: OpenVINO GenAI, a long-RoPE model's factors follow the largest position in the
step, and no cache is recomputed at the threshold.

A Phi-3 checkpoint with `rope_type: longrope` (`original_max_position_embeddings` 64) exported
by optimum-intel: the exported graph picks the long or short factors per call from the largest
position it is given, which is right for one sequence per call. `ContinuousBatchingPipeline`
feeds every scheduled token of every request as one call, so a request beside another one
past the threshold gets the long factors too, and a prompt prefilled in chunks, or a sequence
that grows past the threshold, mixes keys rotated with the short factors with long-factor
queries. The reference is greedy decoding over the same IR by OpenVINO's runtime
(`openvino.Core`), the whole sequence in one call at each token (what transformers'
`generate` gives: it recomputes the cache when the sequence passes the threshold).

Model files: `python -m engines.findings models DIR` (batching-engines) writes the
`tiny-phi3-longrope` preset as a plain transformers checkpoint under
DIR/tiny-phi3-longrope/. The script converts it with OpenVINO's documented route,
`optimum-cli export openvino --task text-generation-with-past --weight-format fp32`
(optimum-intel), into IR-DIR/tiny-phi3-longrope/ (default DIR/openvino-ir/), once.
optimum-intel must be importable: in the venv of `bash ci/openvino-env.sh` it is the layer in
<venv>/optimum-export (optimum-intel 2.2.0 with transformers 5.5.4), which the script puts on
the exporter's PYTHONPATH itself; OPTIMUM_EXPORT_PATH names another folder. An IR converted
elsewhere can be given with --ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r21_openvino_long_rope_step_wide.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 21,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny-phi3-longrope"],
    "workaround": "engines/adapters/openvino/adapter.py: known_differences declares parity, "
                  "reference_parity, prefill_decode and seeds on a long-RoPE model",
    "upstream": "not filed (nearest: huggingface/optimum-intel#913, #1504 (open), #1744; "
                "vllm-project/vllm#6283)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("OpenVINO GenAI: a long-RoPE model's factors follow the largest position in the step, "
         "and no cache is recomputed at the threshold")


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


class Reference:
    """Greedy tokens, and each one's logprob, with the whole sequence in one call of the IR
    at each token."""

    def __init__(self, ir: Path) -> None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(ir / "openvino_model.xml"))
        self.req = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}) \
            .create_infer_request()

    def __call__(self, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
        import numpy as np

        out: list[int] = []
        lps: list[float] = []
        for _ in range(n):
            seq = prompt + out
            self.req.reset_state()
            self.req.infer({"input_ids": np.array([seq], np.int64),
                            "attention_mask": np.ones((1, len(seq)), np.int64),
                            "position_ids": np.arange(len(seq), dtype=np.int64)[None],
                            "beam_idx": np.zeros(1, np.int32)})
            x = self.req.get_tensor("logits").data[0, -1].astype(np.float64)
            out.append(int(x.argmax()))
            lps.append(float(-np.log(np.exp(x - x.max()).sum())))  # the argmax's logprob
        return out, lps


def together(ir: Path, requests: list[tuple[list[int], int]],
             budget: int = 256) -> list[tuple[list[int], list[float]]]:
    """The requests added together on a fresh pipeline, greedy; each one's tokens and their
    logprobs."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 64, 8
    sc.dynamic_split_fuse, sc.max_num_batched_tokens = True, budget
    pipe = ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    handles = []
    for i, (prompt, n) in enumerate(requests):
        gc = ov_genai.GenerationConfig()
        gc.max_new_tokens, gc.ignore_eos, gc.do_sample = n, True, False
        gc.set_eos_token_id(0)
        gc.logprobs = 1
        handles.append(pipe.add_request(i, ov.Tensor(np.array([prompt], np.int64)), gc))
    outs: list[tuple[list[int], list[float]]] = [([], []) for _ in handles]
    while pipe.has_non_finished_requests():
        pipe.step()
        for k, h in enumerate(handles):
            while h.can_read():
                for seq in h.read().values():
                    outs[k][0].extend(int(t) for t in seq.generated_ids)
                    outs[k][1].extend(float(lp) for lp in seq.generated_log_probs)
    return outs


SHORT = [969, 207]
LONG = [824, 772, 48, 368, 120, 419, 700, 610, 511, 753, 202, 840, 622, 447, 428, 829, 253, 233,
        765, 758, 122, 304, 238, 868, 998, 596, 315, 660, 887, 716, 184, 681, 645, 486, 741, 274,
        454, 50, 952, 748, 482, 560, 309, 773, 80, 1018, 291, 368, 248, 475, 929, 780, 240, 850,
        271, 902, 468, 858, 28, 137, 464, 877, 384, 133, 325, 235, 953, 630, 483, 388]
CROSSING = SHORT + LONG[:58]  # 60 tokens: passes 64 at its 5th generated token


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 21: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny-phi3-longrope")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    ref = Reference(ir)
    # (what, expected, observed); each case on a fresh pipeline, budget 256 unless named
    cases = [
        ("2-token prompt alone, 8 tokens", ref(SHORT, 8), together(ir, [(SHORT, 8)])[0]),
        ("the same beside the long prompt's first 64 tokens (positions up to 63)",
         ref(SHORT, 8), together(ir, [(SHORT, 8), (LONG[:64], 1)])[0]),
        ("the same beside its first 65 tokens (position 64), 8 tokens",
         ref(SHORT, 8), together(ir, [(SHORT, 8), (LONG[:65], 1)])[0]),
        ("the same beside the 70-token prompt, 8 tokens each",
         ref(SHORT, 8), together(ir, [(SHORT, 8), (LONG, 8)])[0]),
        ("70-token prompt alone, 4 tokens, prefilled in one step",
         ref(LONG, 4), together(ir, [(LONG, 4)])[0]),
        ("the same, prefilled in chunks of 32 (max_num_batched_tokens=32)",
         ref(LONG, 4), together(ir, [(LONG, 4)], budget=32)[0]),
        ("60-token prompt alone, 10 tokens (passes 64 positions at its 5th)",
         ref(CROSSING, 10), together(ir, [(CROSSING, 10)])[0]),
    ]
    bad = 0
    for what, expected, observed in cases:
        same = observed[0] == expected[0]
        gap = max((abs(a - b) for a, b in zip(observed[1], expected[1], strict=False)), default=0.0)
        print(what)
        print(f"  expected: {expected[0]}")
        print(f"  observed: {observed[0]}{'' if same else '  <- differs'}; first logprob "
              f"{abs(observed[1][0] - expected[1][0]):.1e} off, the largest {gap:.1e}")
        bad += not same or gap > 1e-3
    print(f"{bad} of {len(cases)} cases differ (in tokens, or by more than 1e-3 in a logprob)")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
