"""Report 18: CTranslate2's converter, Llama-3 RoPE loses `original_max_position_embeddings`;
Gemma-2 loses soft-capping and the sliding window; Phi-3 fails.

`ctranslate2.converters.TransformersConverter` (what `ct2-transformers-converter` runs),
float32, then greedy tokens with `Generator.generate_batch` against transformers' own
forward of the same checkpoint (eager attention):

- Llama-3 RoPE: the checkpoint (`rope_type: llama3`, `original_max_position_embeddings` 64)
  and a copy with that field set to 8192, each converted and run on one 40-token prompt;
- Gemma-2: the checkpoint (attention soft-cap 50, final soft-cap 30, window 16 on layers 0
  and 2) and a copy without soft-capping and with every layer full, each converted and run
  on one 24-token prompt;
- Phi-3 (long-RoPE): the conversion itself.

Expected: each converted model gives its checkpoint's tokens (or the converter refuses it).
Where the converted models of a checkpoint and of its copy give the same tokens while
transformers gives each other ones, the converter dropped the field.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny-llama-rope`, `tiny-gemma-mixed` and
`tiny-phi3-longrope`). The copies are written beside the conversions, under
DIR/ctranslate2-<version>/ (weights linked, config.json changed), and everything is converted
once.

    python -m engines.findings models /tmp/m
    .venv-ct2/bin/python docs/findings/r18_ct2_converter_drops_fields.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 18,
    "library": "ctranslate2",
    "venv": "ct2",
    "presets": ["tiny-llama-rope", "tiny-gemma-mixed", "tiny-phi3-longrope"],
    "workaround": "engines/adapters/ct2/adapter.py: converter_losses declares reference_parity "
                  "for Llama-3 RoPE and Gemma-2 checkpoints",
    "upstream": "not filed (nearest: OpenNMT/CTranslate2#1745 / #1751, #1772)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("CTranslate2's converter: Llama-3 RoPE loses original_max_position_embeddings; "
         "Gemma-2 loses soft-capping and the sliding window; Phi-3 fails")


class CannotRun(Exception):
    pass


def work_dir(model_dir: Path) -> Path:
    import ctranslate2

    return model_dir / f"ctranslate2-{ctranslate2.__version__}"


def variant(model_dir: Path, preset: str, name: str,
            change: Callable[[dict], None]) -> Path:
    """A copy of the preset's checkpoint whose config.json `change` edits (weights linked)."""
    source = model_dir / preset
    out = work_dir(model_dir) / f"r18-{preset}-{name}-checkpoint"
    if (out / "config.json").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in source.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f.resolve())
    config = json.loads((source / "config.json").read_text())
    change(config)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def convert(model_dir: Path, checkpoint: Path, name: str) -> Path:
    """The checkpoint converted with TransformersConverter (float32), once per version."""
    from ctranslate2.converters import TransformersConverter

    if not (checkpoint / "config.json").is_file():
        raise CannotRun(f"no checkpoint at {checkpoint} (python -m engines.findings models DIR)")
    out = work_dir(model_dir) / name
    if not (out / "model.bin").is_file():
        TransformersConverter(str(checkpoint)).convert(str(out), quantization="float32",
                                                       force=True)
    # The loader writes `bos_token`/`unk_token: null` for a tokenizer without them (this
    # one), which the runtime then refuses to load ("type must be string, but is null"):
    # name the EOS there. No prompt here starts with it.
    config = json.loads((out / "config.json").read_text())
    unset = [k for k in ("bos_token", "unk_token") if k in config and config[k] is None]
    if unset:
        config.update(dict.fromkeys(unset, config["eos_token"]))
        (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def greedy_ct2(path: Path, prompt: list[int], n: int) -> list[int]:
    import ctranslate2

    words = json.loads((path / "vocabulary.json").read_text())
    ids = {w: i for i, w in enumerate(words)}
    gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    result = gen.generate_batch([[words[t] for t in prompt]], max_length=n, sampling_topk=1,
                                end_token=[], include_prompt_in_result=False)[0]
    return [ids[w] for w in result.sequences[0]]


def greedy_hf(checkpoint: Path, prompt: list[int], n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def set_original(config: dict) -> None:
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(config.get(key), dict):
            config[key]["original_max_position_embeddings"] = 8192


def no_softcap_no_window(config: dict) -> None:
    # (transformers' Gemma-2 builds a sliding mask whatever the layers: the window stays set)
    config.update(attn_logit_softcapping=None, final_logit_softcapping=None)
    if config.get("layer_types"):
        config["layer_types"] = ["full_attention"] * len(config["layer_types"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, required=True)
    args = ap.parse_args()
    print(f"report 18: {TITLE}")
    try:
        import ctranslate2
        import numpy as np

        print(f"ctranslate2 {ctranslate2.__version__}")
        for preset in LEDGER["presets"]:
            if not (args.model_dir / preset / "config.json").is_file():
                raise CannotRun(f"no checkpoint at {args.model_dir / preset} "
                                f"(python -m engines.findings models DIR)")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    rng = np.random.default_rng(18)
    wrong = 0
    for preset, field, change, length in (
            ("tiny-llama-rope", "original_max_position_embeddings 8192", set_original, 40),
            ("tiny-gemma-mixed", "no soft-capping, every layer full", no_softcap_no_window,
             24)):
        prompt = [int(t) for t in rng.integers(0, 1023, size=length)]
        copy = variant(args.model_dir, preset, "changed", change)
        print(f"{preset}, a {length}-token prompt, 10 greedy tokens; the checkpoint, then a "
              f"copy with {field}:")
        rows = []
        for label, checkpoint in (("checkpoint", args.model_dir / preset), ("copy", copy)):
            try:
                ct2 = greedy_ct2(convert(args.model_dir, checkpoint,
                                         f"r18-{preset}-{label}"), prompt, 10)
            except CannotRun:
                raise
            except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
                ct2 = [f"{type(e).__name__}: {e}"]
            ref = greedy_hf(checkpoint, prompt, 10)
            rows.append((ct2, ref))
            print(f"  {label}: expected {ref} (transformers); observed {ct2} (ctranslate2)")
        if rows[0][0] != rows[0][1]:
            wrong += 1
            if rows[0][0] == rows[1][0] and rows[0][1] != rows[1][1]:
                print("  the converted models give the same tokens: the converter dropped "
                      "what the copy changed")
    try:
        path = convert(args.model_dir, args.model_dir / "tiny-phi3-longrope",
                       "r18-tiny-phi3-longrope")
        observed = f"converted, {greedy_ct2(path, list(range(1, 9)), 4)}"
    except CannotRun:
        raise
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        observed = f"{type(e).__name__}: {e}"
        wrong += 1
    print("tiny-phi3-longrope (long-RoPE, rope_type in rope_parameters):")
    print("  expected: converted (or refused with a reason)")
    print(f"  observed: {observed}")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
