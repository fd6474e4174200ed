"""Report 24: mistral.rs panics in its KV cache on a batch of a sliding-window model's prompts
of different lengths.

Standalone: imports only `mistralrs` (and the standard library). The model is the
`tiny-mistral-swa` preset (Mistral, 4 layers, `sliding_window` 16, random weights) as a plain
transformers checkpoint under `--model-dir` (made once by `python -m engines.findings models
DIR` in this project's venv). mistral.rs 0.9.5 needs what the checkpoint lacks, so the script
writes a loadable copy into a temporary folder: the config's older `rope_theta` /
`rope_scaling` fields (its loaders refuse transformers 5's `rope_parameters` alone), a
word-level tokenizer whose token i is the word " t{i}" (the Python API takes text, so a prompt
of ids is the text of those words and the streamed text reads back as ids) and a chat template
that passes the message through.

Three prompts of random ids (50, 98 and 54 tokens, `random.Random(0)`), each longer than the
window, are sent back to back as greedy streamed chat requests of 8 tokens to one Runner
(`max_seqs=8`, `prefix_cache_n=0`, F32, F32 KV cache), then each stream is read on a thread
of its own.

    python docs/findings/r24_mistralrs_sliding_window_batch_panic.py --model-dir DIR

(in the venv of `bash ci/mistralrs-env.sh`, whose last stdout line is its python).
Exit 1: a stream failed (the bug); 0: all three served; 2: cannot run.
"""

LEDGER = {
    "report": 24,
    "library": "mistralrs",
    "venv": "mistralrs",
    "presets": ["tiny-mistral-swa"],
    "workaround": "engines/adapters/mistralrs/adapter.py: sliding-window models are refused "
                  "(SLIDING_WINDOW_PANICS)",
    "upstream": "not filed (nearest: EricLBuehler/mistral.rs#246, closed: one sequence, fixed by "
                "#244)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

PRESET = "tiny-mistral-swa"
LENGTHS = (50, 98, 54)
NEW_TOKENS = 8
TITLE = ("report 24: mistral.rs, a batch of a sliding-window model's prompts of different "
         "lengths panics in the KV cache")


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
    os.environ.setdefault("MISTRALRS_CPU_KV_F32", "1")  # the model's F32, not its f16 default
    try:
        import mistralrs
    except ImportError as e:
        cannot_run(f"mistralrs is not importable: {e}")
    print(f"mistralrs {version('mistralrs')}")

    with tempfile.TemporaryDirectory(prefix="r24-") as tmp:
        folder = Path(tmp)
        vocab = loadable_copy(src, folder)
        window = json.loads((folder / "config.json").read_text()).get("sliding_window")
        rng = random.Random(0)
        prompts = [[rng.randrange(vocab) for _ in range(n)] for n in LENGTHS]
        runner = mistralrs.Runner(
            which=mistralrs.Which.Plain(model_id=str(folder),
                                        arch=mistralrs.Architecture.Mistral,
                                        dtype=mistralrs.ModelDType.F32),
            max_seqs=8, prefix_cache_n=0, token_source="none",
            jinja_explicit=str(folder / "chat_template.jinja"))

        def request(ids: list[int]) -> object:
            return mistralrs.ChatCompletionRequest(
                messages=[{"role": "user", "content": "".join(f" t{i}" for i in ids)}],
                model="default", max_tokens=NEW_TOKENS, temperature=0.0, stream=True)

        # Sent back to back (the Runner queues them), then read concurrently.
        streams = [iter(runner.send_chat_completion_request(request(p))) for p in prompts]
        results = ["no end of its stream in 600 s" for _ in prompts]

        def read(i: int) -> None:
            words: list[str] = []
            try:
                for chunk in streams[i]:
                    words += (chunk.choices[0].delta.content or "").split()
                results[i] = f"{len(words)} tokens"
            except Exception as e:  # the library's failure is what this script observes
                results[i] = f"{type(e).__name__}: {e}"

        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)

    print(f"sliding_window {window}; prompts of {list(LENGTHS)} tokens, {NEW_TOKENS} greedy "
          "tokens each, one Runner (max_seqs 8, prefix_cache_n 0)")
    print(f"expected: {[f'{NEW_TOKENS} tokens'] * len(prompts)}")
    print(f"observed: {results}")
    if all(r == f"{NEW_TOKENS} tokens" for r in results):
        print("RESULT: fixed")
        sys.exit(0)
    print("RESULT: reproduces")
    sys.exit(1)


if __name__ == "__main__":
    main()
