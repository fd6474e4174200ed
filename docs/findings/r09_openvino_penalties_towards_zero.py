"""Report 9: OpenVINO GenAI, presence and frequency penalties move a logit towards zero
instead of always lowering it (positive penalty) or raising it (negative penalty).

OpenVINO GenAI documents `frequency_penalty` and `presence_penalty` in OpenAI's words; OpenAI's
definition (and vLLM's) subtracts `penalty * count` (frequency) or `penalty` (presence) from a
generated token's logit whatever its sign. The library's sampler (`FrequencyPenaltyTransform`,
`PresencePenaltyTransform` in src/cpp/src/sampling/logit_transformers.hpp) subtracts from a
non-negative logit and adds to a negative one. The script decodes greedily through
`ContinuousBatchingPipeline` with a penalty and, as the reference, greedily over the same IR's
logits run by OpenVINO's runtime (`openvino.Core`, the whole sequence each token), with each
rule applied: the library's tokens follow "towards zero".

Model files: `python -m engines.findings models DIR` (batching-engines) writes the `tiny`
preset as a plain transformers checkpoint under DIR/tiny/. The script converts it with
OpenVINO's documented route, `optimum-cli export openvino --task text-generation-with-past
--weight-format fp32` (optimum-intel), into IR-DIR/tiny/ (default DIR/openvino-ir/), once.
optimum-intel must be importable: in the venv of `bash ci/openvino-env.sh` it is the layer in
<venv>/optimum-export, which the script puts on the exporter's PYTHONPATH itself;
OPTIMUM_EXPORT_PATH names another folder. An IR converted elsewhere can be given with
--ir-dir.

    python -m engines.findings models /tmp/m
    .venv-openvino/bin/python docs/findings/r09_openvino_penalties_towards_zero.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 9,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny"],
    "workaround": "engines/adapters/openvino/adapter.py: presence_penalty and "
                  "frequency_penalty not declared",
    "upstream": "not filed (no report found)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "OpenVINO GenAI: presence and frequency penalties move a logit towards zero"


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


def library(ir: Path, prompt: list[int], n: int, kind: str, penalty: float) -> list[int]:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    sc = ov_genai.SchedulerConfig()
    sc.cache_size, sc.num_kv_blocks, sc.max_num_seqs = 0, 16, 4
    pipe = ov_genai.ContinuousBatchingPipeline(
        str(ir), sc, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    gc = ov_genai.GenerationConfig()
    gc.max_new_tokens, gc.ignore_eos, gc.do_sample = n, True, False
    setattr(gc, f"{kind}_penalty", penalty)
    h = pipe.add_request(0, ov.Tensor(np.array([prompt], dtype=np.int64)), gc)
    out: list[int] = []
    while pipe.has_non_finished_requests():
        pipe.step()
        while h.can_read():
            for seq in h.read().values():
                out += [int(t) for t in seq.generated_ids]
    return out


class Logits:
    """The IR's last-position logits for a whole sequence, by OpenVINO's runtime."""

    def __init__(self, ir: Path) -> None:
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(ir / "openvino_model.xml"))
        self.req = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}) \
            .create_infer_request()

    def __call__(self, seq: list[int]):
        import numpy as np

        self.req.reset_state()
        n = len(seq)
        self.req.infer({"input_ids": np.array([seq], np.int64),
                        "attention_mask": np.ones((1, n), np.int64),
                        "position_ids": np.arange(n, dtype=np.int64)[None],
                        "beam_idx": np.zeros(1, np.int32)})
        return self.req.get_tensor("logits").data[0, -1].astype(np.float64)


def reference(logits: Logits, prompt: list[int], n: int, kind: str, penalty: float,
              rule: str) -> list[int]:
    """Greedy over the IR's logits with the penalty applied by `rule`: "openai" (subtract
    penalty * count, or penalty once present) or "towards_zero" (that amount subtracted from
    a logit >= 0, added to a negative one)."""
    out: list[int] = []
    for _ in range(n):
        x = logits(prompt + out)
        for t in set(out):
            amount = penalty * (out.count(t) if kind == "frequency" else 1)
            x[t] -= amount if rule == "openai" or x[t] >= 0 else -amount
        out.append(int(x.argmax()))
    return out


# (prompt, penalty kind, penalty): the reported cases, frequency_penalty
CASES = [
    ([37, 235, 908, 72, 767, 905, 715, 645], "frequency", -2.0),
    ([37, 235, 908, 72, 767, 905, 715, 645], "frequency", -1.0),
    ([168, 527, 493, 584, 534, 299, 466, 75], "frequency", -2.0),
]
# presence_penalty follows the same rule in the source, but no greedy case was found where the
# two rules give different tokens (4 + 40 prompts, penalties -2 and 2): it adds or subtracts
# the penalty once, which rarely changes the argmax.


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--ir-dir", type=Path, default=None)
    args = ap.parse_args()
    print(f"report 9: {TITLE}")
    try:
        import openvino_genai as ov_genai
        print(f"openvino-genai {ov_genai.__version__}")
        ir = convert(args.model_dir, args.ir_dir, "tiny")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    logits = Logits(ir)
    n, bad = 24, 0
    for prompt, kind, penalty in CASES:
        got = library(ir, prompt, n, kind, penalty)
        openai = reference(logits, prompt, n, kind, penalty, "openai")
        towards = reference(logits, prompt, n, kind, penalty, "towards_zero")
        print(f"prompt {prompt}, {kind}_penalty={penalty}, greedy, {n} tokens:")
        print(f"  expected (OpenAI's rule): {openai}")
        print(f"  observed:                 {got}"
              f"{' = the towards-zero rule' if got == towards else ''}")
        if got != towards:
            print(f"  (towards zero would give  {towards})")
        bad += got != openai
    print(f"{bad} of {len(CASES)} cases differ from OpenAI's rule")
    print("RESULT: reproduces" if bad else "RESULT: fixed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
