"""Report 26: mistral.rs, `Runner(seed=...)` fails on the CPU, and a request has no seed.

Standalone: imports only `mistralrs` (and the standard library). The model is the `tiny`
preset (Qwen2, random weights) as a plain transformers checkpoint under `--model-dir` (made
once by `python -m engines.findings models DIR` in this project's venv); the script writes a
copy mistral.rs 0.9.5 loads into a temporary folder (the config's older `rope_theta` /
`rope_scaling` fields, a word-level tokenizer whose token i is " t{i}", a chat template that
passes the message through).

It builds a CPU Runner with `seed=7`, then (in the same process) one without a seed, and
reads whether `ChatCompletionRequest` takes a `seed`.

    python docs/findings/r26_mistralrs_cpu_seed.py --model-dir DIR

(in the venv of `bash ci/mistralrs-env.sh`, whose last stdout line is its python).
Exit 1: the seeded Runner fails (the bug); 0: it is built; 2: cannot run.
"""

LEDGER = {
    "report": 26,
    "library": "mistralrs",
    "venv": "mistralrs",
    "presets": ["tiny"],
    "workaround": "engines/adapters/mistralrs/adapter.py: seeded requests are refused "
                  "(SEEDS_LIMIT)",
    "upstream": "not filed (the candle error: huggingface/candle#2216 (closed), #3297 (open); "
                "EricLBuehler/mistral.rs#766 added the seed)",
}

import argparse  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

PRESET = "tiny"
TITLE = "report 26: mistral.rs, Runner(seed=...) fails on the CPU, and a request has no seed"


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


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def request_fields(cls: type) -> str:
    text = getattr(cls, "__text_signature__", None)
    if text:
        return text
    try:
        return str(inspect.signature(cls))
    except (TypeError, ValueError):
        return ""


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

    with tempfile.TemporaryDirectory(prefix="r26-") as tmp:
        folder = Path(tmp)
        loadable_copy(src, folder)

        def runner(**seed: int) -> str:
            try:
                r = mistralrs.Runner(
                    which=mistralrs.Which.Plain(model_id=str(folder),
                                                arch=mistralrs.Architecture.Qwen2,
                                                dtype=mistralrs.ModelDType.F32),
                    max_seqs=8, token_source="none",
                    jinja_explicit=str(folder / "chat_template.jinja"), **seed)
            except Exception as e:  # the library's failure is what this script observes
                return first_line(e)
            out = r.send_chat_completion_request(mistralrs.ChatCompletionRequest(
                messages=[{"role": "user", "content": " t1 t2 t3"}], model="default",
                max_tokens=2, temperature=1.0))
            return f"built; a sampled request gave {out.choices[0].message.content!r}"

        seeded = runner(seed=7)
        unseeded = runner()
    fields = request_fields(mistralrs.ChatCompletionRequest)
    has_seed = bool(re.search(r"\bseed\b", fields)) if fields else "unknown (no signature)"
    print("expected: Runner(seed=7) is built on the CPU (or refuses the seed by name)")
    print(f"observed: Runner(seed=7): {seeded}")
    print(f"          then Runner() in the same process: {unseeded}")
    print(f"          ChatCompletionRequest has a `seed` parameter: "
          f"{has_seed}")
    if seeded.startswith("built"):
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
