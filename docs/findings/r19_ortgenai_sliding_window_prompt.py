"""Report 19: onnxruntime-genai, a sliding-window model fails on a prompt past twice its
window, and shorter prompts past the window are not windowed.

A Mistral checkpoint with `sliding_window: 16` (no `layer_types`), built by the library's own
builder with its defaults. The script prefills prompts of n = 4, 16, 17, 24, 32 and 40 tokens
with the `Generator` (greedy) and compares the last position's logits with transformers'
forward of the same checkpoint (eager attention, which applies the window), then generates
4 tokens (36 after a 4-token prompt: past 32 positions in the decoding loop). It also
prints what the builder wrote for the window (`genai_config.json`'s `sliding_window`, each
`GroupQueryAttention`'s `local_window_size`).

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny-mistral-swa`: Mistral, 4 layers,
window 16, whose tokenizer names its EOS). The script builds the ONNX model with the
library's own builder, `python -m onnxruntime_genai.models.builder -i DIR/tiny-mistral-swa
-o OUT -p fp32 -e cpu`, into DIR/ortgenai-<version>/tiny-mistral-swa/, once (the builder needs
onnx, onnx-ir, torch and transformers < 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r19_ortgenai_sliding_window_prompt.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 19,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny-mistral-swa"],
    "workaround": None,
    "upstream": "not filed (nearest: microsoft/onnxruntime#29904, "
                "microsoft/onnxruntime-genai#282); the builder's Phi-3 KeyError not filed "
                "separately",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "onnxruntime-genai: a sliding-window model fails on a prompt past twice its window"
PRESET = "tiny-mistral-swa"


class CannotRun(Exception):
    pass


def build(model_dir: Path, preset: str, extra: tuple[str, ...] = ()) -> Path:
    """The preset built by onnxruntime_genai.models.builder (fp32, cpu), once per version."""
    import onnxruntime_genai as og

    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ortgenai-{og.__version__}" / "-".join((preset, *extra))
    if (out / "genai_config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source),
           "-o", str(out), "-p", "fp32", "-e", "cpu",
           "-c", str(out.parent / f".cache-{out.name}")]
    if extra:
        cmd += ["--extra_options", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise CannotRun(f"the builder failed on {source}: {' | '.join(tail)}")
    return out


def window_sizes(path: Path) -> list[int]:
    """local_window_size of each GroupQueryAttention node of the built model."""
    import onnx

    graph = onnx.load(str(path / "model.onnx"), load_external_data=False).graph
    return [a.i for n in graph.node if n.op_type == "GroupQueryAttention"
            for a in n.attribute if a.name == "local_window_size"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 19: {TITLE}")
    try:
        import numpy as np
        import onnxruntime_genai as og
        import torch
        from transformers import AutoModelForCausalLM

        print(f"onnxruntime-genai {og.__version__}")
        path = build(args.model_dir, PRESET)
        hf = AutoModelForCausalLM.from_pretrained(str(args.model_dir / PRESET),
                                                  attn_implementation="eager",
                                                  dtype=torch.float32).eval()
        model = og.Model(og.Config(str(path)))
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    window = hf.config.sliding_window
    genai = json.loads((path / "genai_config.json").read_text())
    print(f"checkpoint: sliding_window {window}; the build: genai_config sliding_window "
          f"{genai['model']['decoder'].get('sliding_window')}, local_window_size "
          f"{window_sizes(path)}")
    prompt_all = [int(t) for t in np.random.default_rng(19).integers(0, 1023, size=40)]
    failed: list[tuple[int, int]] = []
    off: list[tuple[int, int]] = []
    for n, new in ((4, 4), (16, 4), (17, 4), (24, 4), (4, 36), (32, 4), (40, 4)):
        prompt = prompt_all[:n]
        with torch.no_grad():
            ref = hf(torch.tensor([prompt])).logits[0, -1].numpy()
        tokens: list[int] = []
        try:
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=n + new, do_sample=False)
            gen = og.Generator(model, params)
            gen.append_tokens(np.array([prompt], dtype=np.int32))
            logits = np.asarray(gen.get_logits()).reshape(-1)
            while not gen.is_done():
                gen.generate_next_token()
                tokens.append(int(gen.get_next_tokens()[0]))
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            message = str(e).split("Status Message: ")[-1].split("INVALID_ARGUMENT : ")[-1]
            print(f"n = {n}, {new} tokens: expected: served; observed: {type(e).__name__} "
                  f"after {len(tokens)} tokens: {message.strip()[:260]}")
            failed.append((n, new))
            continue
        diff = float(np.abs(logits - ref).max())
        print(f"n = {n}, {new} tokens: served, {tokens[:4]}...; the prefill's logits against "
              f"transformers': max |difference| {diff:.2g}" + (" (the window is not applied)"
                                                if diff > 1e-3 else ""))
        if diff > 1e-3:
            off.append((n, new))
    print("  expected: every prompt served, with transformers' logits (within 1e-3)")
    print(f"  observed: failed for (n, tokens) = {failed}; logits off for {off}")
    wrong = bool(failed or off)
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
