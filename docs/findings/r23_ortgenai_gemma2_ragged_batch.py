"""Report 23: onnxruntime-genai, a Gemma-2 model as its builder makes it fails every batch of
prompts of different lengths.

A Gemma-2 checkpoint whose `layer_types` mix sliding (window 16) and full layers, built by
the library's own builder with its defaults, which give the sliding layers a window-sized KV
cache (`windowed_kv_cache`). The script submits prompts of 3 and 4 tokens together to the
`Engine` (greedy, 4 tokens each), then a 3-token prompt alone to the same Engine, then runs a
4-token prompt with the `Generator` (`max_length` 8). Expected: transformers' greedy tokens
(eager attention, soft-capping included), which the same builder's output with
`--extra_options windowed_kv_cache=false` gives in every case (the control).

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny-gemma-mixed`: Gemma-2, 4 layers,
window 16, layers 0 and 2 sliding, whose tokenizer names its EOS). The script builds the ONNX
model with the library's own builder, `python -m onnxruntime_genai.models.builder -i
DIR/tiny-gemma-mixed -o OUT -p fp32 -e cpu` (and the control with `--extra_options
windowed_kv_cache=false`), under DIR/ortgenai-<version>/, once (the builder needs onnx,
onnx-ir, torch and transformers < 5.20: the venv of `bash ci/ortgenai-env.sh` has them).

    python -m engines.findings models /tmp/m
    .venv-ortgenai/bin/python docs/findings/r23_ortgenai_gemma2_ragged_batch.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 23,
    "library": "onnxruntime-genai",
    "venv": "ortgenai",
    "presets": ["tiny-gemma-mixed"],
    "workaround": "engines/adapters/ortgenai/convert.py: builder_options builds with "
                  "windowed_kv_cache=false",
    "upstream": "not filed (nearest: microsoft/onnxruntime-genai#2334, #2356; "
                "microsoft/onnxruntime#29904, #32419)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("onnxruntime-genai: a Gemma-2 model as its builder makes it fails every batch of "
         "prompts of different lengths")
PRESET = "tiny-gemma-mixed"
PROMPTS = [[11, 300, 42], [749, 508, 390, 977]]


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


def short(e: Exception) -> str:
    """The library's message without the node's path: its cause's words."""
    text = str(e).strip()
    cause = text.split("Status Message: ")[-1][:160]
    if " Cause: " in text:
        return f"{text.split(' Cause: ')[0]} ({cause})"
    return cause


def engine_turns(path: Path, batches: list[list[list[int]]]) -> list[list[list[int] | str]]:
    """Each batch of prompts submitted together on one Engine, one batch after the other:
    each request's greedy tokens (4), or how it failed."""
    import numpy as np
    import onnxruntime_genai as og

    engine = og.Engine(og.Model(og.Config(str(path))))
    buffer = engine.create_event_buffer(64)
    out: list[list[list[int] | str]] = []
    for prompts in batches:
        got: list[list[int] | str] = [[] for _ in prompts]
        try:
            requests = []  # a request the caller drops is closed
            for prompt in prompts:
                req = engine.create_request()
                opts = og.TurnOptions(req)
                opts.set_max_generated_tokens(4)
                opts.set_do_sample(False)
                req.begin_turn(np.array(prompt, dtype=np.int32), opts)
                requests.append(req)
            index = {id(r): i for i, r in enumerate(requests)}
            while engine.has_pending_requests():
                for ev in engine.run(buffer):
                    i = index[id(ev.request)]
                    if ev.flags & og.EngineEventFlags.FAILED:
                        got[i] = ev.error_code.name
                    elif ev.token is not None and isinstance(got[i], list):
                        got[i].append(int(ev.token))
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            message = f"{type(e).__name__}: {short(e)}"
            got = [message if isinstance(g, list) else g for g in got]
        out.append(got)
    return out


def generator_turn(path: Path, prompt: list[int]) -> list[int] | str:
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(path)))
    try:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + 4, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array([prompt], dtype=np.int32))
        tokens = []
        while not gen.is_done():
            gen.generate_next_token()
            tokens.append(int(gen.get_next_tokens()[0]))
        return tokens
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        return f"{type(e).__name__}: {short(e)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 23: {TITLE}")
    try:
        import onnxruntime_genai as og
        import torch
        from transformers import AutoModelForCausalLM

        print(f"onnxruntime-genai {og.__version__}")
        default = build(args.model_dir, PRESET)
        control = build(args.model_dir, PRESET, ("windowed_kv_cache=false",))
        hf = AutoModelForCausalLM.from_pretrained(str(args.model_dir / PRESET),
                                                  attn_implementation="eager",
                                                  dtype=torch.float32).eval()
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2

    def reference(prompt: list[int]) -> list[int]:
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(4):
                ids.append(int(hf(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[len(prompt):]

    expected = [reference(p) for p in PROMPTS]
    batches = [PROMPTS, PROMPTS[:1]]
    print(f"Engine: prompts of 3 and 4 tokens together {PROMPTS}, then the 3-token one alone; "
          f"Generator: the 4-token one, max_length 8")
    print(f"  expected: {[expected, expected[:1]]}, then {expected[1]} (transformers, eager)")
    wrong = False
    for label, path in (("default build", default), ("windowed_kv_cache=false", control)):
        try:
            got = engine_turns(path, batches)
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            got = [[f"{type(e).__name__}: {e}"]]
        alone = generator_turn(path, PROMPTS[1])
        print(f"  observed, {label}: Engine {got}")
        print(f"    Generator {alone}")
        if label == "default build":
            wrong = got != [expected, expected[:1]] or alone != expected[1]
        elif got != [expected, expected[:1]] or alone != expected[1]:
            print("  (the control is wrong too: not this report's failure)")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
