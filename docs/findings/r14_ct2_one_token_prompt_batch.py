"""Report 14: CTranslate2, a batch whose shortest prompt has one token gives the longer prompts
wrong tokens.

`Generator.generate_batch(prompts, include_prompt_in_result=False)`, greedy: each prompt's
tokens in a batch are compared with the same prompt's tokens alone. Where the batch's
shortest prompt has one token, a longer prompt's result starts with its own prompt tokens
after the first, and then the right tokens, `max_length` counting both. The script runs a
1-token prompt beside an 8-token one, the same batch with `include_prompt_in_result=True`
(right), and a sweep of seeded random batches of 2 to 6 prompts of 1 to 64 tokens, counting
the wrong ones with and without a 1-token prompt, and those whose result is exactly the
prompt's tail followed by its tokens alone.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2). The script converts it
with CTranslate2's own converter (`ctranslate2.converters.TransformersConverter`, what
`ct2-transformers-converter --model DIR/tiny --quantization float32` runs) into
DIR/ctranslate2-<version>/tiny/, once.

    python -m engines.findings models /tmp/m
    .venv-ct2/bin/python docs/findings/r14_ct2_one_token_prompt_batch.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 14,
    "library": "ctranslate2",
    "venv": "ct2",
    "presets": ["tiny"],
    "workaround": "engines/adapters/ct2/adapter.py: _batch_key batches 1-token prompts only "
                  "with 1-token prompts",
    "upstream": "not filed (nearest: OpenNMT/CTranslate2#1480, #1291, #1579 (open), PR #1145; "
                "different)",
}

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("CTranslate2: a batch whose shortest prompt has one token gives the longer prompts "
         "wrong tokens")
SHORT = [5]
LONG = [749, 508, 390, 11, 300, 42, 977, 61]


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
    ap.add_argument("--batches", type=int, default=30, help="random batches in the sweep")
    args = ap.parse_args()
    print(f"report 14: {TITLE}")
    try:
        import ctranslate2
        import numpy as np

        print(f"ctranslate2 {ctranslate2.__version__}")
        path = convert(args.model_dir, "tiny")
        words = json.loads((path / "vocabulary.json").read_text())
        gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    ids = {w: i for i, w in enumerate(words)}

    def greedy(prompts: list[list[int]], max_length: int = 4,
               with_prompt: bool = False) -> list[list[int]]:
        results = gen.generate_batch([[words[t] for t in p] for p in prompts],
                                     max_length=max_length, sampling_topk=1, end_token=[],
                                     include_prompt_in_result=with_prompt)
        return [[ids[w] for w in r.sequences[0]] for r in results]

    def tail_then_alone(prompt: list[int], alone: list[int], n: int = 4) -> list[int]:
        return (prompt[1:] + alone)[:n]

    wrong = False
    try:
        batch = [SHORT, LONG]
        alone = [greedy([p], max_length=10)[0] for p in batch]
        together = greedy(batch, max_length=10)
        print(f"prompts of 1 and 8 tokens {batch}, max_length=10, greedy:")
        print(f"  expected: {alone} (each prompt alone)")
        print(f"  observed: {together} (in one batch)")
        wrong = together != alone
        if wrong and together[1] == tail_then_alone(LONG, alone[1], 10):
            print("  the 8-token prompt's result is its own tokens 2 to 8, then its first 3 "
                  "tokens alone")
        # include_prompt_in_result=True: max_length counts the prompt after its first token
        full = greedy(batch, max_length=len(LONG) - 1 + 10, with_prompt=True)
        cut = [r[len(p):][:10] for p, r in zip(batch, full, strict=True)]
        print(f"  include_prompt_in_result=True, in one batch, the tokens after each prompt: "
              f"{cut} ({'right' if cut == alone else 'wrong too'})")
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        print(f"observed: {type(e).__name__}: {e}")
        wrong = True

    rng = np.random.default_rng(14)
    counts = {True: [0, 0, 0], False: [0, 0, 0]}  # 1-token prompt: [wrong, as tail, batches]
    for _ in range(args.batches):
        n = int(rng.integers(2, 7))
        lengths = [int(x) for x in rng.integers(1, 65, size=n)]
        if rng.random() < 0.5:
            lengths[int(rng.integers(n))] = 1
        prompts = [[int(t) for t in rng.integers(0, 1023, size=k)] for k in lengths]
        alone = [greedy([p])[0] for p in prompts]
        together = greedy(prompts)
        key = min(lengths) == 1 and max(lengths) > 1
        counts[key][0] += together != alone
        counts[key][1] += together == [a if len(p) == 1 else tail_then_alone(p, a)
                                       for p, a in zip(prompts, alone, strict=True)]
        counts[key][2] += 1
    print("random batches (2-6 prompts of 1-64 tokens, seed 14), max_length=4:")
    print(f"  with a 1-token prompt beside a longer one: wrong in {counts[True][0]} of "
          f"{counts[True][2]}; in {counts[True][1]} every longer prompt's result is its tokens "
          f"2 to 5 (then its tokens alone)")
    print(f"  without: wrong in {counts[False][0]} of {counts[False][2]}")
    wrong = wrong or counts[True][0] > 0
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
