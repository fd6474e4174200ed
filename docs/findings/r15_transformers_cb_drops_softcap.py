"""Report 15 of docs/findings.md: transformers, continuous batching drops Gemma-2's attention
logit soft-capping.

Run (transformers as installed; the report is about 5.24.0 and 5.25.0):

    python docs/findings/r15_transformers_cb_drops_softcap.py --model-dir DIR

The `tiny-gemma-mixed` checkpoint (Gemma-2, `attn_logit_softcapping` 50, random weights), a
2-token prompt, one greedy token and its logprob through `generate_batch` (continuous
batching, `return_logprobs=True`), against the same model's own eager forward, with and
without its attention soft-cap.
"""

LEDGER = {
    "report": 15,
    "library": "transformers",
    "venv": "main",
    "presets": ["tiny-gemma-mixed"],
    "needs": ["torch"],  # a release venv of transformers gets torch (CPU) beside it
    "workaround": "engines/adapters/hf/adapter.py: reference_parity and logprobs declared "
                  "failing on models whose attention soft-caps",
    "upstream": "not filed (the same bug in vllm-project/vllm-metal#665, fixed by #666)",
}

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "15. transformers: continuous batching drops Gemma-2's attention logit soft-capping"
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
        from transformers import AutoModelForCausalLM, ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()

    def forward_logprobs() -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([PROMPT])).logits[0, -1]
        return torch.log_softmax(logits.float(), -1)

    capped = forward_logprobs()
    caps = [layer.self_attn.attn_logit_softcapping for layer in model.model.layers]
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = forward_logprobs()
    for layer, cap in zip(model.model.layers, caps, strict=True):
        layer.self_attn.attn_logit_softcapping = cap

    gen = GenerationConfig(max_new_tokens=1, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64, return_logprobs=True,
                                  use_cuda_graph=False)
    try:
        out = model.generate_batch(inputs=[PROMPT], generation_config=gen,
                                   continuous_batching_config=cb, progress_bar=False)
        (result,) = out.values()
        token, logprob = result.generated_tokens[0], float(result.logprobs[0])
    except Exception as exc:  # a crash is not what this report is about
        print(f"observed: {type(exc).__name__}: {exc}")
        print("RESULT: cannot-run continuous batching failed on this model")
        return 2
    want, nocap = float(capped[token]), float(uncapped[token])
    print(f"prompt {PROMPT}, attn_logit_softcapping {caps[0]}")
    print(f"expected: token {int(capped.argmax())} at logprob {want:.6f} (the model's eager "
          "forward, soft-capped)")
    print(f"observed: token {token} at logprob {logprob:.6f} (continuous batching); the model "
          f"without its attention cap gives {nocap:.6f}")
    if abs(logprob - want) <= 1e-4:
        print("RESULT: fixed")
        return 0
    print(f"(off by {abs(logprob - want):.2e} from the capped model, {abs(logprob - nocap):.2e} "
          "from the uncapped one)")
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
