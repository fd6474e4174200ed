"""Report 27: mistral.rs, `min_p = 1.0` does not keep only the most likely token.

Standalone: imports only `mistralrs` (and the standard library). The model is the `tiny`
preset (Qwen2, random weights) as a plain transformers checkpoint under `--model-dir` (made
once by `python -m engines.findings models DIR` in this project's venv); the script writes a
copy mistral.rs 0.9.5 loads into a temporary folder (the config's older `rope_theta` /
`rope_scaling` fields, a word-level tokenizer whose token i is " t{i}", a chat template that
passes the message through).

For six prompts it reads the model's top 20 logprobs of the first token (greedy, F32, F32 KV
cache), then draws that token several times at temperature 1.0 under `min_p` 0.5, 0.999 and
1.0, and counts the draws outside the tokens min-p keeps (probability >= min_p x the most
likely one's; for 1.0 the most likely token alone, as transformers' MinPLogitsWarper and vLLM
keep).

    python docs/findings/r27_mistralrs_min_p_one.py --model-dir DIR

(in the venv of `bash ci/mistralrs-env.sh`, whose last stdout line is its python).
Exit 1: a min_p = 1.0 draw is not the most likely token (the bug); 0: none; 2: cannot run.
"""

LEDGER = {
    "report": 27,
    "library": "mistralrs",
    "venv": "mistralrs",
    "presets": ["tiny"],
    "workaround": "engines/adapters/mistralrs/adapter.py: min_p is refused by name "
                  "(out of SUPPORTED_SAMPLING)",
    "upstream": "not filed (EricLBuehler/mistral.rs#625 added min-p; nothing reports the boundary)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

PRESET = "tiny"
MIN_PS = (0.5, 0.999, 1.0)
DRAWS = 5  # per prompt and min_p
TITLE = "report 27: mistral.rs, min_p = 1.0 does not keep only the most likely token"


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

    with tempfile.TemporaryDirectory(prefix="r27-") as tmp:
        folder = Path(tmp)
        vocab = loadable_copy(src, folder)
        runner = mistralrs.Runner(
            which=mistralrs.Which.Plain(model_id=str(folder), arch=mistralrs.Architecture.Qwen2,
                                        dtype=mistralrs.ModelDType.F32),
            max_seqs=8, prefix_cache_n=0, token_source="none",
            jinja_explicit=str(folder / "chat_template.jinja"))

        def first_token(text: str, **sampling: float) -> object:
            return runner.send_chat_completion_request(mistralrs.ChatCompletionRequest(
                messages=[{"role": "user", "content": text}], model="default", max_tokens=1,
                **sampling)).choices[0]

        rng = random.Random(4)
        prompts = [" ".join(f"t{rng.randrange(vocab)}" for _ in range(n))
                   for n in (1, 5, 9, 12, 3, 7)]
        outside = dict.fromkeys(MIN_PS, 0)
        kept_sizes: dict[float, list[int]] = {m: [] for m in MIN_PS}
        undecided = 0
        for text in prompts:
            choice = first_token(text, temperature=0.0, logprobs=True, top_logprobs=20)
            tops = {int(t.token): float(t.logprob) for t in choice.logprobs.content[0].top_logprobs}
            best = max(tops.values())
            for m in MIN_PS:
                kept = {t for t, lp in tops.items() if lp >= best + math.log(m)}
                if len(kept) == len(tops):  # the kept set may reach past the top 20
                    undecided += 1
                    continue
                kept_sizes[m].append(len(kept))
                for _ in range(DRAWS):
                    word = first_token(text, temperature=1.0, min_p=m).message.content.split()
                    token = int(word[0].removeprefix("t"))
                    outside[m] += token not in kept

    print(f"{len(prompts)} prompts x {DRAWS} draws of the first token at temperature 1.0")
    for m in MIN_PS:
        print(f"min_p {m}: tokens min-p keeps per prompt {kept_sizes[m]}; "
              f"expected 0 draws outside them, observed {outside[m]} "
              f"of {DRAWS * len(kept_sizes[m])}")
    if undecided:
        print(f"({undecided} prompt/min_p pairs skipped: their kept set reached past the top 20)")
    if not kept_sizes[1.0]:
        cannot_run("no prompt could be judged at min_p 1.0")
    if outside[1.0] == 0:
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
