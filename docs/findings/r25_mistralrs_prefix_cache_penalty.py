"""Report 25: mistral.rs, after a prefix-cache hit the first token's repetition penalty leaves
out the reused prompt tokens.

Standalone: imports only `mistralrs` (and the standard library). The model is the `tiny`
preset (Qwen2, random weights) as a plain transformers checkpoint under `--model-dir` (made
once by `python -m engines.findings models DIR` in this project's venv); the script writes a
copy mistral.rs 0.9.5 loads into a temporary folder (the config's older `rope_theta` /
`rope_scaling` fields, a word-level tokenizer whose token i is " t{i}", a chat template that
passes the message through).

The prompt is P = B + S: its greedy first token g (no penalty) is a token of the prefix B and
not of the suffix S (the script picks B and S so, from random ids). Two Runners, greedy, F32:
- prefix cache off (`prefix_cache_n=0`): P with a penalty (repetition 1.8; then presence
  2.0, a control: it counts generated tokens only), whose first token then avoids g;
- prefix cache on (`prefix_cache_n=16`): B alone first (1 token, no penalty), so that B's KV
  is cached, then P with the same penalty.
Expected: the same tokens on both (the penalty counts every prompt token, cached or not).

    python docs/findings/r25_mistralrs_prefix_cache_penalty.py --model-dir DIR

(in the venv of `bash ci/mistralrs-env.sh`, whose last stdout line is its python).
Exit 1: the cached run's tokens differ (the bug); 0: equal; 2: cannot run.
"""

LEDGER = {
    "report": 25,
    "library": "mistralrs",
    "venv": "mistralrs",
    "presets": ["tiny"],
    "workaround": "engines/adapters/mistralrs/adapter.py: repetition_penalty is refused where "
                  "the prefix cache is on (prefix_cache_n > 0)",
    "upstream": "not filed (nearest: EricLBuehler/mistral.rs#1638, #95, #1000)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

PRESET = "tiny"
NEW_TOKENS = 4
# The presence penalty counts generated tokens only (OpenAI's definition), so it is a control.
PENALTIES = ({"repetition_penalty": 1.8}, {"presence_penalty": 2.0})
TITLE = ("report 25: mistral.rs, after a prefix-cache hit the first token's repetition penalty "
         "leaves out the reused prompt tokens")


def cannot_run(why: str) -> None:
    print(f"RESULT: cannot-run {why}")
    sys.exit(2)


def loadable_copy(src: Path, dst: Path) -> int:
    """src (a transformers checkpoint) as a folder mistral.rs loads; returns its vocab size."""
    config = json.loads((src / "config.json").read_text())
    rope = config.get("rope_parameters") or {}
    config.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    config.setdefault("rope_scaling", None)  # the preset's RoPE is the default one
    (dst / "config.json").write_text(json.dumps(config))
    for f in src.glob("*.safetensors"):
        shutil.copyfile(f, dst / f.name)
    n = int(config["vocab_size"])
    space = "\u0120"  # the byte-level alphabet's space: "\u0120t5" is the text " t5"
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "post_processor": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": False}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "WordLevel", "unk_token": f"{space}t0",
                  "vocab": {f"{space}t{i}": i for i in range(n)}},
    }
    (dst / "tokenizer.json").write_text(json.dumps(tokenizer))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000,
        "unk_token": f"{space}t0", "bos_token": None, "eos_token": None, "pad_token": None}))
    (dst / "chat_template.jinja").write_text(
        "{% for message in messages %}{{ message['content'] }}{% endfor %}")
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, type=Path,
                        help=f"the folder holding {PRESET}/ (config.json, model.safetensors)")
    args = parser.parse_args()
    print(TITLE)
    src = args.model_dir / PRESET
    if not (src / "config.json").is_file() or not list(src.glob("*.safetensors")):
        cannot_run(f"no {PRESET} checkpoint (config.json, *.safetensors) in {src}")
    os.environ.setdefault("MISTRALRS_CPU_KV_F32", "1")
    try:
        import mistralrs
    except ImportError as e:
        cannot_run(f"mistralrs is not importable: {e}")
    print(f"mistralrs {version('mistralrs')}")

    with tempfile.TemporaryDirectory(prefix="r25-") as tmp:
        folder = Path(tmp)
        vocab = loadable_copy(src, folder)

        def runner(prefix_cache_n: int) -> object:
            return mistralrs.Runner(
                which=mistralrs.Which.Plain(model_id=str(folder),
                                            arch=mistralrs.Architecture.Qwen2,
                                            dtype=mistralrs.ModelDType.F32),
                max_seqs=8, prefix_cache_n=prefix_cache_n, token_source="none",
                jinja_explicit=str(folder / "chat_template.jinja"))

        def generate(r: object, ids: list[int], n: int, **penalty: float) -> list[int]:
            out = r.send_chat_completion_request(mistralrs.ChatCompletionRequest(
                messages=[{"role": "user", "content": "".join(f" t{i}" for i in ids)}],
                model="default", max_tokens=n, temperature=0.0, **penalty))
            return [int(w.removeprefix("t")) for w in out.choices[0].message.content.split()]

        off = runner(0)
        # A prompt B + S whose greedy first token is in B and not in S.
        rng = random.Random(0)
        found = None
        for _ in range(40):
            b = [rng.randrange(vocab) for _ in range(12)]
            s = [rng.randrange(vocab) for _ in range(3)]
            g = generate(off, b + s, 1)[0]
            b[rng.randrange(len(b))] = g
            g = generate(off, b + s, 1)[0]
            if g in b and g not in s:
                found = (b, s, g)
                break
        if found is None:
            cannot_run("no prompt B + S found whose greedy first token is in B only")
        b, s, g = found
        prompt = b + s
        print(f"B = {b}, S = {s}; greedy first token of B + S without a penalty: {g}")
        rows = []
        for penalty in PENALTIES:
            expected = generate(off, prompt, NEW_TOKENS, **penalty)
            on = runner(16)  # a fresh Runner per case: only B is cached when B + S comes
            generate(on, b, 1)
            observed = generate(on, prompt, NEW_TOKENS, **penalty)
            # Which tokens the cache changed: cache off, the observed first token given as
            # prompt.
            rest = generate(off, prompt + observed[:1], NEW_TOKENS - 1, **penalty)
            rows.append((penalty, expected, observed, rest))
    for penalty, expected, observed, rest in rows:
        (name, value), = penalty.items()
        print(f"{name} {value}:")
        print(f"  expected (prefix cache off): {expected}")
        print(f"  observed (after B was cached): {observed}")
        if "repetition_penalty" in penalty:  # it counts prompt and output tokens alike
            print(f"  cache off, B + S + {observed[:1]} as the prompt: "
                  f"{observed[:1]} + {rest}")
    if all(e == o for _, e, o, _ in rows):
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
