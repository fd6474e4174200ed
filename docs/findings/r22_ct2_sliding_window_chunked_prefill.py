"""Report 22: CTranslate2, a sliding-window model's prompt is prefilled in chunks of the
window, and a later chunk attends past it.

A Mistral checkpoint with `sliding_window: 16`, converted with CTranslate2's converter (which
carries the window). `Generator.generate_batch(..., include_prompt_in_result=False,
max_length=1, return_logits_vocab=True)` gives the first generated token's logits. The script
compares their log-softmax with transformers' forward of the same checkpoint (eager
attention, which applies the window): a prompt alone of n = 16, 17, 18, 24 and 48 tokens; the
24-token prompt beside a 2-token and beside an 18-token prompt (the library forwards the
batch's shortest prompt length - 1 tokens at once); and, as the control, the 24- and
48-token prompts with `include_prompt_in_result=True` (every prompt token fed one at a
time). Then `forward_batch` on 16 and 17 tokens.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny-mistral-swa`: Mistral, 4 layers,
window 16). The script converts it with CTranslate2's own converter
(`ctranslate2.converters.TransformersConverter`, what `ct2-transformers-converter --model
DIR/tiny-mistral-swa --quantization float32` runs) into
DIR/ctranslate2-<version>/tiny-mistral-swa/, once.

    python -m engines.findings models /tmp/m
    .venv-ct2/bin/python docs/findings/r22_ct2_sliding_window_chunked_prefill.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 22,
    "library": "ctranslate2",
    "venv": "ct2",
    "presets": ["tiny-mistral-swa"],
    "workaround": None,
    "upstream": "not filed (nearest: OpenNMT/CTranslate2#1524; the same class fixed in "
                "pytorch/executorch#21857)",
}

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("CTranslate2: a sliding-window model's prompt is prefilled in chunks of the window, "
         "and a later chunk attends past it")
PRESET = "tiny-mistral-swa"
TOLERANCE = 1e-4


class CannotRun(Exception):
    pass


def convert(model_dir: Path, preset: str) -> Path:
    """The preset converted with TransformersConverter (float32), once per library version."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    source = model_dir / preset
    if not (source / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {source} (python -m engines.findings models DIR)")
    out = model_dir / f"ctranslate2-{ctranslate2.__version__}" / preset
    if not (out / "model.bin").is_file():
        try:
            TransformersConverter(str(source)).convert(str(out), quantization="float32",
                                                       force=True)
        except Exception as e:  # noqa: BLE001
            raise CannotRun(f"TransformersConverter failed on {source}: {e}") from e
    # The loader writes `bos_token`/`unk_token: null` for a tokenizer without them (this
    # one), which the runtime then refuses to load ("type must be string, but is null"):
    # name the EOS there. No prompt here starts with it.
    config = json.loads((out / "config.json").read_text())
    unset = [k for k in ("bos_token", "unk_token") if k in config and config[k] is None]
    if unset:
        config.update(dict.fromkeys(unset, config["eos_token"]))
        (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 22: {TITLE}")
    try:
        import ctranslate2
        import numpy as np
        import torch
        from transformers import AutoModelForCausalLM

        print(f"ctranslate2 {ctranslate2.__version__}")
        path = convert(args.model_dir, PRESET)
        words = json.loads((path / "vocabulary.json").read_text())
        gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
        hf = AutoModelForCausalLM.from_pretrained(str(args.model_dir / PRESET),
                                                  attn_implementation="eager",
                                                  dtype=torch.float32).eval()
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    vocab = hf.config.vocab_size
    rng = np.random.default_rng(22)
    prompt = [int(t) for t in rng.integers(0, vocab - 1, size=48)]
    other = [int(t) for t in rng.integers(0, vocab - 1, size=18)]

    def log_softmax(x: "np.ndarray") -> "np.ndarray":
        x = x.astype(np.float64)
        return x - x.max() - np.log(np.exp(x - x.max()).sum())

    def reference(p: list[int]) -> "np.ndarray":
        with torch.no_grad():
            return log_softmax(hf(torch.tensor([p])).logits[0, -1].numpy())

    def ct2(prompts: list[list[int]], with_prompt: bool = False) -> list["np.ndarray"]:
        results = gen.generate_batch(
            [[words[t] for t in p] for p in prompts], sampling_topk=1, end_token=[],
            max_length=max(len(p) for p in prompts) if with_prompt else 1,
            include_prompt_in_result=with_prompt, return_logits_vocab=True)
        out = []
        for p, r in zip(prompts, results, strict=True):
            # the last step's logits: those of the token after the prompt (with the prompt
            # in the result, max_length counts the prompt's tokens after its first)
            if with_prompt and len(r.sequences[0]) != len(p) + 1:
                raise RuntimeError(f"{len(r.sequences[0])} tokens, not the prompt and one")
            out.append(log_softmax(np.asarray(r.logits[-1]).reshape(-1, vocab)[-1]))
        return out

    wrong = 0
    cases = [(f"alone, n = {n}", [prompt[:n]], 0) for n in (16, 17, 18, 24, 48)]
    cases += [("n = 24 beside a 2-token prompt", [other[:2], prompt[:24]], 1),
              ("n = 24 beside an 18-token prompt", [other, prompt[:24]], 1)]
    print(f"the first token's log-probs against transformers' (eager), max |difference|; "
          f"expected within {TOLERANCE} everywhere:")
    for label, prompts, index in cases:
        try:
            got = ct2(prompts)[index]
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            print(f"  {label}: observed: {type(e).__name__}: {e}")
            wrong += 1
            continue
        ref = reference(prompts[index])
        diff = float(np.abs(got - ref).max())
        same = int(got.argmax()) == int(ref.argmax())
        print(f"  {label}: observed {diff:.2g}" + ("" if same else
                                                   " (another greedy token)"))
        wrong += diff > TOLERANCE
    for n in (24, 48):
        try:
            got = ct2([prompt[:n]], with_prompt=True)[0]
            diff = float(np.abs(got - reference(prompt[:n])).max())
            print(f"  control, n = {n} with include_prompt_in_result=True (fed one at a "
                  f"time): {diff:.2g}")
        except Exception as e:  # noqa: BLE001
            print(f"  control, n = {n} with include_prompt_in_result=True: "
                  f"{type(e).__name__}: {e}")
    for n in (16, 17):
        try:
            gen.forward_batch([[words[t] for t in prompt[:n]]])
            print(f"forward_batch on {n} tokens: runs")
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            print(f"forward_batch on {n} tokens: expected: runs; observed: "
                  f"{type(e).__name__}: {e}")
            wrong += 1
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
