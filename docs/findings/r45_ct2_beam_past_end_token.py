"""Report 45: CTranslate2, with several end tokens, a beam search goes on past an end token.

`Generator.generate_batch(..., beam_size=2, end_token=[several])`. Each step takes the best
`2 x beam_size` candidates; a candidate among the first `beam_size` that ends is registered
as a finished hypothesis and replaced by the next candidate of the others that does not end.
Where more than `beam_size` of the `2 x beam_size` candidates end, one ended candidate is not
replaced and stays an active beam: the search goes on from it, and where it registers that
beam again (at `max_length`, or a later end token) the hypothesis holds an end token before
its last position. The script takes one prompt, reads the best first tokens from the library
itself (`forward_batch`), names the 2nd to 4th best as end tokens (so 3 of the first step's 4
candidates end), and runs: patience 3 with `max_length=2` (the case first reported), then
patience 1 with `max_length=2`, and `length_penalty=0` with patience 1 and `max_length=4`;
then the 1st to 3rd best as end tokens (both first candidates end) with patience 3 and 1 (1
stops at that step and hides it). Controls: end tokens that are the 2nd and 3rd best only
(2 of 4 end: every ended candidate is replaced) and a single end token.

Model files: `python -m engines.findings models DIR` (batching-engines) writes plain
transformers checkpoints under DIR/<preset>/ (here `tiny`, a Qwen2). The script converts it
with CTranslate2's own converter (`ctranslate2.converters.TransformersConverter`, what
`ct2-transformers-converter --model DIR/tiny --quantization float32` runs) into
DIR/ctranslate2-<version>/tiny/, once.

    python -m engines.findings models /tmp/m
    .venv-ct2/bin/python docs/findings/r45_ct2_beam_past_end_token.py --model-dir /tmp/m

Exit status: 1 while the bug reproduces, 0 once fixed, 2 when it cannot run.
"""

LEDGER = {
    "report": 45,
    "library": "ctranslate2",
    "venv": "ct2",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: OpenNMT/CTranslate2 PR #911, PR #1073, PR #481, PR #1198, "
                "#1740 (open))",
}

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "CTranslate2: with several end tokens, a beam search continues a beam past an end token"
PROMPT = [749, 508, 390]


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
    print(f"report 45: {TITLE}")
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
    prompt = [words[t] for t in PROMPT]
    log_probs = np.asarray(gen.forward_batch([prompt], return_log_probs=True))[0, -1]
    best = [int(t) for t in np.argsort(-log_probs)[:4]]
    print(f"prompt {PROMPT}: best first tokens {best} (log-probs "
          f"{[round(float(log_probs[t]), 3) for t in best]})")

    def search(ends: list[int], **options: float) -> list[tuple[list[int], float]]:
        result = gen.generate_batch([prompt], beam_size=2, num_hypotheses=2, sampling_topk=1,
                                    end_token=[words[t] for t in ends], return_end_token=True,
                                    return_scores=True, include_prompt_in_result=False,
                                    **options)[0]
        return [([ids[w] for w in seq], round(score, 3))
                for seq, score in zip(result.sequences, result.scores, strict=True)]

    three, two, one, first = best[1:4], best[1:3], best[1:2], best[0:3]
    cases = [  # (end tokens, options, what the case is)
        (three, {"max_length": 2, "patience": 3.0}, ""),
        (three, {"max_length": 2, "patience": 1.0}, ""),
        (three, {"max_length": 4, "patience": 1.0, "length_penalty": 0.0}, ""),
        (first, {"max_length": 2, "patience": 3.0}, " (both first candidates end)"),
        (first, {"max_length": 2, "patience": 1.0},
         " (both first candidates end: with patience 1 the search stops at that step, "
         "which hides it)"),
        (two, {"max_length": 2, "patience": 3.0},
         " (control: at most beam_size of the 4 candidates end)"),
        (one, {"max_length": 2, "patience": 3.0},
         " (control: at most beam_size of the 4 candidates end)"),
    ]
    wrong = 0
    for ends, options, label in cases:
        try:
            hyps = search(ends, **options)
        except Exception as e:  # noqa: BLE001  (a crash of the library is an observation)
            print(f"end_token {ends}, {options}: observed: {type(e).__name__}: {e}")
            wrong += 1
            continue
        past = [h for h, _ in hyps if any(t in ends for t in h[:-1])]
        print(f"beam_size 2, end_token {ends}, {options}{label}:")
        print("  expected: no hypothesis holds an end token before its last position")
        print(f"  observed: {hyps} (hypothesis, score)"
              + (f": {past} go on past an end token" if past else ""))
        wrong += bool(past)
    print(f"{wrong} of {len(cases)} cases wrong")
    print("RESULT: reproduces" if wrong else "RESULT: fixed")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
