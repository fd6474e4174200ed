"""Report 5 of docs/findings.md: transformers 5.16.0 to 5.20.2, continuous batching on a CPU
needs psutil, which transformers does not declare.

Run (transformers 5.16.0 first on PYTHONPATH, e.g. `pip install --target /tmp/tf-5.16.0
transformers==5.16.0`):

    PYTHONPATH=/tmp/tf-5.16.0 python docs/findings/r05_transformers_cb_needs_psutil.py \
        --model-dir DIR

The script hides psutil (`sys.modules["psutil"] = None`, before transformers is imported), as
in an environment where it is not installed (transformers' own requirements do not pull it
in), then asks continuous batching for a small paged cache of a given size on the CPU.
"""

LEDGER = {
    "report": 5,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "version": "5.16.0",  # the release it reproduces on; the pinned 5.25.0 has the fix
    "workaround": "pyproject.toml: psutil is a dependency of this package",
    "upstream": "fixed upstream in 5.21.0; not filed (no report found)",
}

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "5. transformers: continuous batching on a CPU needs psutil, undeclared"


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny"
    print(TITLE)
    if not (model_dir / "config.json").is_file():
        print(f"RESULT: cannot-run no checkpoint at {model_dir}")
        return 2
    # What an environment without psutil looks like to importlib.util.find_spec.
    sys.modules["psutil"] = None  # type: ignore[assignment]
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, psutil hidden")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = GenerationConfig(max_new_tokens=2, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(block_size=16, num_blocks=8, max_batch_tokens=64)
    print("expected: 2 greedy tokens from a paged cache of 8 blocks of 16 (num_blocks and "
          "max_batch_tokens given)")
    try:
        out = model.generate_batch(inputs=[[1, 2, 3]], generation_config=gen,
                                   continuous_batching_config=cb, progress_bar=False)
        tokens = [list(o.generated_tokens) for o in out.values()]
    except Exception as exc:  # the library's failure is what this reports
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: reproduces")
        return 1
    print(f"observed: {tokens}")
    if tokens and len(tokens[0]) == 2:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
