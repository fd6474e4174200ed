"""Report 20 of docs/findings.md: transformers 5.16 to 5.20, Gemma-2's default `sdpa`
attention drops the attention soft-cap silently (5.21.0 defaults Gemma-2 to eager).

Run (the release under test first on PYTHONPATH, e.g. `pip install --target /tmp/tf-5.16.0
transformers==5.16.0`; without it, the installed transformers):

    PYTHONPATH=/tmp/tf-5.16.0 python docs/findings/r20_transformers_gemma2_sdpa_drops_softcap.py \
        --model-dir DIR

The `tiny-gemma-mixed` checkpoint (Gemma-2, `attn_logit_softcapping` 50, random weights),
loaded by `from_pretrained` with the default attention and with `attn_implementation="eager"`;
the next token's top-5 logprobs after the prompt (112, 113).
"""

LEDGER = {
    "report": 20,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny-gemma-mixed"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "version": "5.16.0",  # the release it reproduces on; the pinned 5.25.0 has the fix
    "workaround": "engines/models.py: attention_for asks for eager attention where the "
                  "config soft-caps attention",
    "upstream": "fixed upstream in 5.21.0 (the change not traced); not filed (background: "
                "huggingface/transformers#32865)",
}

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("20. transformers: Gemma-2's default sdpa attention drops the attention soft-cap "
         "silently")
PROMPT = [112, 113]


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny-gemma-mixed"
    print(TITLE)
    if not (model_dir / "config.json").is_file():
        print(f"RESULT: cannot-run no checkpoint at {model_dir}")
        return 2
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")

    def top5(**kwargs: str) -> tuple[str, dict[int, float]]:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kwargs)
        model.eval()
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([PROMPT])).logits[0, -1], -1)
        values, ids = lp.topk(5)
        return (model.config._attn_implementation,
                {int(i): round(float(v), 6) for i, v in zip(ids, values, strict=True)})

    default_impl, default = top5()
    _, eager = top5(attn_implementation="eager")
    print(f"prompt {PROMPT}, the next token's top-5 logprobs")
    print(f"expected: {eager} (eager attention, which applies the cap)")
    print(f"observed: {default} (the default attention: {default_impl})")
    diff = max(abs(default.get(t, -99.0) - v) for t, v in eager.items())
    if diff <= 1e-4:
        print("RESULT: fixed")
        return 0
    print(f"(off by up to {diff:.2e})")
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
