"""Report 16 of docs/findings.md: transformers, continuous batching on a long-RoPE model
(Phi-3) depends on the batch.

Run (transformers as installed; the report is about 5.24.0 and 5.25.0):

    python docs/findings/r16_transformers_cb_longrope_batch.py --model-dir DIR

The `tiny-phi3-longrope` checkpoint (Phi-3, `rope_type: longrope`, short factors up to
`original_max_position_embeddings` 64, long ones past it; random weights), greedy, on the CPU:

- (a) a 2-token request's tokens and logprobs through `generate_batch` (continuous
  batching) alone, and beside an 80-token request that is past the threshold;
- (b) a 33-token prompt with 40 new tokens (the sequence crosses 64 positions) through
  `generate_batch` and through `generate`, which recomputes the cache with the long factors
  when the sequence first passes the threshold.
"""

LEDGER = {
    "report": 16,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny-phi3-longrope"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "workaround": "engines/adapters/hf/adapter.py: LONGROPE_FAILS declares the checks failing "
                  "on long-RoPE models",
    "upstream": "not filed (discussed for vLLM: vllm-project/vllm#6283 (open); "
                "ggml-org/llama.cpp#24875)",
}

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "16. transformers: continuous batching on a long-RoPE model (Phi-3) depends on the batch"
SHORT = [5, 17]
LONG = [(7 * i + 3) % 1000 + 1 for i in range(80)]
CROSSING = [(11 * i + 5) % 1000 + 1 for i in range(33)]


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny-phi3-longrope"
    print(TITLE)
    if not (model_dir / "config.json").is_file():
        print(f"RESULT: cannot-run no checkpoint at {model_dir}")
        return 2
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    cb = ContinuousBatchingConfig(num_blocks=64, max_batch_tokens=256, return_logprobs=True,
                                  use_cuda_graph=False)

    def batch(prompts: list[list[int]], new: int) -> list[tuple[list[int], list[float]]]:
        gen = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=-1,
                               pad_token_id=0)
        out = model.generate_batch(inputs=prompts, generation_config=gen,
                                   continuous_batching_config=cb, progress_bar=False)
        by_prompt = {tuple(o.prompt_ids): o for o in out.values()}
        return [(list(by_prompt[tuple(p)].generated_tokens),
                 [round(float(x), 5) for x in by_prompt[tuple(p)].logprobs]) for p in prompts]

    bugs = 0
    alone = batch([SHORT], 2)[0]
    beside = batch([SHORT, LONG], 2)[0]
    print(f"(a) prompt {SHORT}, 2 greedy tokens, beside an {len(LONG)}-token prompt")
    print(f"    expected: {alone[0]} logprobs {alone[1]} (the same request alone)")
    print(f"    observed: {beside[0]} logprobs {beside[1]}")
    if beside[0] != alone[0] or max(abs(x - y) for x, y in zip(beside[1], alone[1],
                                                              strict=True)) > 1e-4:
        bugs += 1

    with torch.no_grad():
        ref = model.generate(torch.tensor([CROSSING]), max_new_tokens=40, do_sample=False,
                             eos_token_id=-1, pad_token_id=0)[0, len(CROSSING):].tolist()
    got = batch([CROSSING], 40)[0][0]
    first = next((i for i, (x, y) in enumerate(zip(ref, got, strict=True)) if x != y), None)
    print(f"(b) a {len(CROSSING)}-token prompt, 40 greedy tokens (positions 33 to 72)")
    print(f"    expected: generate's {ref}")
    print(f"    observed: {got}")
    if first is not None:
        print(f"    first difference at generated token {first + 1}, computed from a "
              f"{len(CROSSING) + first}-token sequence (the threshold is 64)")
        bugs += 1
    if bugs:
        print("RESULT: reproduces")
        return 1
    print("RESULT: fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
