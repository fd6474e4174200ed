"""Report 31 of docs/findings.md: transformers, continuous batching's `num_return_sequences`
fails a one-token prompt.

Run (transformers as installed; the report is about 5.25.0):

    python docs/findings/r31_transformers_cb_children_one_token_prompt.py --model-dir DIR

The `tiny` checkpoint (any causal LM does), `generate_batch` (continuous batching) with
`num_return_sequences=2`, 3 sampled tokens, for a two-token prompt, for a one-token prompt
beside a three-token one, and for a one-token prompt alone.
"""

LEDGER = {
    "report": 31,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "workaround": "engines/adapters/hf: a one-token prompt's children are served as requests "
                  "of their own",
    "upstream": "not filed (nearest: huggingface/transformers#42921, #45563 / #45582)",
}

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "31. transformers: continuous batching's num_return_sequences fails a one-token prompt"


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
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = GenerationConfig(num_return_sequences=2, max_new_tokens=3, do_sample=True,
                           eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64, use_cuda_graph=False)

    def samples(*prompts: list[int]) -> dict[str, list[int]]:
        try:
            out = model.generate_batch(inputs=list(prompts), generation_config=gen,
                                       continuous_batching_config=cb, progress_bar=False)
        except Exception as exc:  # the library's failure is what this reports
            return {"raised": [f"{type(exc).__name__}: {exc}"]}  # type: ignore[list-item]
        return {key: list(o.generated_tokens) for key, o in sorted(out.items())}

    two = samples([0, 1])
    beside = samples([0], [5, 6, 7])
    one = samples([0])
    print(f"prompt [0, 1]: {two}")
    print(f"prompts [0] and [5, 6, 7] in one call: {beside}")
    if len(two) != 2:
        print("RESULT: cannot-run continuous batching here gives no second sequence even for "
              "a two-token prompt (num_return_sequences not served)")
        return 2
    print("expected: for prompt [0], two samples of 3 tokens, as for [0, 1]")
    print(f"observed: for prompt [0]: {one}")
    if len(one) == 2 and all(len(t) == 3 for t in one.values()):
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
