"""Report 30: CTranslate2, `suppress_sequences` counts a longer prompt's tail as output when a
shorter prompt shares the batch.

`Generator.generate_batch(..., include_prompt_in_result=False, suppress_sequences=[[a, b]])`,
greedy, where `a` is a 7-token prompt's last token and `b` the first token it generates
alone: the pair straddles the prompt's end, so the output never completes it and the first
token stays `b`. The script runs that prompt alone, beside a 3-token prompt, and beside a
prompt of the same length (control).

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2). The script converts it
with CTranslate2's own converter (`ctranslate2.converters.TransformersConverter`, what
`ct2-transformers-converter --model DIR/tiny --quantization float32` runs) into
DIR/ctranslate2-<version>/tiny/, once.

    python -m engines.findings models /tmp/m
    .venv-ct2/bin/python docs/findings/r30_ct2_suppress_sequences_prompt_tail.py \
        --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 30,
    "library": "ctranslate2",
    "venv": "ct2",
    "presets": ["tiny"],
    "workaround": "engines/adapters/ct2/bad_words.py: a request with bad words is batched only "
                  "with requests of the same bad words and prompt length",
    "upstream": "not filed (nearest: OpenNMT/CTranslate2#1005, #1292, #1480, #1579 (open))",
}

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("CTranslate2: suppress_sequences counts a longer prompt's tail as output when a "
         "shorter prompt shares the batch")
LONG = [749, 508, 390, 11, 300, 42, 977]
SHORT = [61, 5, 88]
SAME_LENGTH = [61, 5, 88, 12, 400, 7, 9]


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
    print(f"report 30: {TITLE}")
    try:
        import ctranslate2

        print(f"ctranslate2 {ctranslate2.__version__}")
        path = convert(args.model_dir, "tiny")
        words = json.loads((path / "vocabulary.json").read_text())
        gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    except (CannotRun, ImportError) as e:
        print(f"RESULT: cannot-run {e}")
        return 2
    ids = {w: i for i, w in enumerate(words)}

    def first_tokens(prompts: list[list[int]], banned: list[list[int]]) -> list[int]:
        results = gen.generate_batch([[words[t] for t in p] for p in prompts], max_length=4,
                                     sampling_topk=1, end_token=[],
                                     include_prompt_in_result=False,
                                     suppress_sequences=[[words[t] for t in s] for s in banned]
                                     or None)
        return [ids[r.sequences[0][0]] for r in results]

    try:
        (first,) = first_tokens([LONG], [])
        pair = [LONG[-1], first]
        alone = first_tokens([LONG], [pair])[0]
        beside_short = first_tokens([SHORT, LONG], [pair])[1]
        beside_same = first_tokens([SAME_LENGTH, LONG], [pair])[1]
    except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
        print(f"observed: {type(e).__name__}: {e}")
        print("RESULT: reproduces")
        return 1
    print(f"prompt {LONG}, greedy first token {first}; suppress_sequences [{pair}] "
          f"(its last prompt token, then {first}):")
    print(f"  expected: first token {alone} (as alone) beside any other prompt")
    print(f"  observed: alone {alone}; beside a 3-token prompt {beside_short}; beside a "
          f"7-token prompt {beside_same} (control)")
    wrong = beside_short != alone
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
