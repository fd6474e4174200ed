"""Report 6 of docs/findings.md: transformers 5.16.0 and 5.17.0, a prompt one token short of
the context cannot be scheduled on a paged pool that holds the context.

Run (the affected release first on PYTHONPATH, e.g. `pip install --target /tmp/tf-5.16.0
transformers==5.16.0`):

    PYTHONPATH=/tmp/tf-5.16.0 python docs/findings/r06_transformers_prompt_one_short_of_pool.py \
        --model-dir DIR

A pool of 8 blocks of 4 tokens (32 tokens), a 31-token prompt, one greedy token, through
`generate_batch` (continuous batching) on the CPU. The request needs 32 cached tokens at most
(its prompt and the token it generates), so 8 blocks.
"""

LEDGER = {
    "report": 6,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "version": "5.16.0",  # the release it reproduces on; the pinned 5.25.0 has the fix
    "workaround": None,
    "upstream": "fixed upstream in 5.18.0; not filed (no report found)",
}

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("6. transformers: a prompt one token short of the context cannot be scheduled on a "
         "pool that holds the context")


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
    # 5.16-5.24 name the block size `block_size`; 5.25 `page_size` (block_size deprecated).
    names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    size = {"page_size": 4} if "page_size" in names else {"block_size": 4}
    cb = ContinuousBatchingConfig(num_blocks=8, max_batch_tokens=64, safety_margin=0.0,
                                  allow_block_sharing=False, use_cuda_graph=False, **size)
    gen = GenerationConfig(max_new_tokens=1, do_sample=False, eos_token_id=-1, pad_token_id=0)
    prompt = list(range(1, 32))
    print(f"pool: 8 blocks of 4 tokens; prompt: {len(prompt)} tokens; max_new_tokens=1")
    print("expected: one greedy token (32 tokens fit the 8 blocks)")
    try:
        out = model.generate_batch(inputs=[prompt], generation_config=gen,
                                   continuous_batching_config=cb, progress_bar=False)
        tokens = [list(o.generated_tokens) for o in out.values()]
    except Exception as exc:  # the library's failure is what this reports
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: reproduces")
        return 1
    if not tokens:
        # generate_batch logs the generation thread's error and returns what it has.
        print("observed: no output for the request: the generation thread ended (the "
              "library logs its error above)")
        print("RESULT: reproduces")
        return 1
    print(f"observed: {tokens}")
    if len(tokens) == 1 and len(tokens[0]) == 1:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
