"""One request at a time with a KV cache: the simplest reference.

Deliberately independent of SlotCache and SlotForward: it runs the model's own forward with
transformers' DynamicCache, so a bug in our batched kernels cannot hide in both sides of a
parity check.

Long-RoPE models (Phi-3) switch from short to long rotary factors once a sequence passes
`original_max_position_embeddings`; transformers' generate then recomputes the whole cache,
so that no key keeps its short-factor rotation (Phi3ForCausalLM.prepare_inputs_for_generation).
This engine does the same at the same token, so it stays generate's semantics.

LoRA adapters (`loras`, name -> PEFT directory; `add_lora` / `remove_lora` at run time) are
served by PEFT itself, over a copy of the model (PEFT wraps the modules it targets in place,
and the model is shared by every engine built over the same preset): a request naming an
adapter runs PeftModel with that adapter set, a base request the untouched model. Cache salts
are honoured trivially: nothing cached outlives its request.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Hashable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from engines.core.beams import BeamSearch, check_beam_request
from engines.core.constraints import row_mask
from engines.core.lora import LoraNames
from engines.core.prompt_logprobs import whole_prompt
from engines.core.request_state import RequestState
from engines.core.sampling import sample
from engines.core.slots import BaseEngine
from engines.models import DEFAULT_PRESET, long_rope_threshold
from engines.protocol import (
    BASE_PARAMS,
    CONSTRAINT_PARAMS,
    PROCESSING_PARAMS,
    TEXT_PARAMS,
    Engine,
    Request,
    StepOutput,
)


class SequentialEngine(BaseEngine):
    name = "sequential"
    CAPABILITIES = dataclasses.replace(BaseEngine.CAPABILITIES, supported_sampling=(
        BASE_PARAMS | PROCESSING_PARAMS | CONSTRAINT_PARAMS | TEXT_PARAMS
        | {"lora", "cache_salt", "prompt_logprobs", "n", "beam_width", "length_penalty"}))

    beam_search = BeamSearch  # the search's rule (engines.core.beams)

    def __init__(self, *args: Any, loras: Mapping[str, str | Path] | None = None,
                 **kwargs: Any) -> None:
        kwargs["max_batch_size"] = 1
        super().__init__(*args, **kwargs)
        # What independent_twin builds over: the model as given (a preset, a checkpoint
        # directory or a module), its seed and the adapters named here.
        self._source = (args[0] if args else kwargs.get("model", DEFAULT_PRESET),
                        kwargs.get("seed", 0), dict(loras or {}))
        self._loras = LoraNames(loras)
        self._peft: Any = None  # a PeftModel over a copy of self.model, once an adapter is
        for name, path in self._loras.paths.items():
            self._load_lora(name, path)
        self._kv: DynamicCache | None = None
        # transformers renamed past_key_values to cache (5.2x); accept both.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._cached = 0  # tokens whose KV is in self._kv
        self._recompute_at = long_rope_threshold(self.model.config)
        # n > 1: a family's prefilled cache, its first logits, cached length and prompt
        # logprobs, until its last waiting child has taken a copy.
        self._forks: dict[Hashable, tuple[DynamicCache, torch.Tensor, int, tuple[Any, ...]]] = {}
        self.forked_prefills = 0  # children that started from a sibling's prefill, ever
        # beam_width > 1: the running request's search (engines.core.beams); its beams are
        # the rows of self._kv.
        self._search: BeamSearch | None = None

    def independent_twin(self) -> Callable[[], Engine] | None:
        """engines.protocol.IndependentTwin: the independent reference (engines.independent)
        over the same model, seed, dtype, device, context and adapters; an adapter added at
        run time is added to it by whoever serves it there (engines.testing.tenant_oracle)."""
        from engines.independent import IndependentEngine

        model, seed, loras = self._source
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        return partial(IndependentEngine, model, device=str(self.device), dtype=dtype,
                       max_model_len=self.max_model_len, seed=seed, loras=loras or None)

    def slot_lengths(self) -> list[int]:
        return [self._cached]

    # --- LoRA (engines.protocol.LoRAManagement) ------------------------------------------------

    @property
    def loras(self) -> dict[str, str]:
        """engines.protocol.loras: the adapters served now, name -> directory."""
        return dict(self._loras.paths)

    def _load_lora(self, name: str, path: str) -> None:
        from peft import PeftModel

        if self._peft is None:
            self._peft = PeftModel.from_pretrained(copy.deepcopy(self.model), path,
                                                   adapter_name=name)
        else:
            self._peft.load_adapter(path, adapter_name=name)
        self._peft.eval()

    def add_lora(self, name: str, path: str) -> None:
        self._loras.check_new(name, path)
        self._load_lora(name, str(path))
        self._loras.paths[name] = str(path)

    def remove_lora(self, name: str) -> None:
        users = [s.request.request_id for s in self._states() if s.request.lora == name]
        self._loras.check_removable(name, users)
        del self._loras.paths[name]
        if self._loras.paths:
            self._peft.delete_adapter(name)
        else:  # PEFT keeps at least one adapter: drop the wrapped copy
            self._peft = None

    def _check(self, request: Request) -> None:
        super()._check(request)
        self._loras.check_request(request)
        check_beam_request(request.params)

    @torch.inference_mode()
    def _forward(self, input_ids: torch.Tensor, *, every: bool = False) -> torch.Tensor:
        """Logits [1, vocab] of the last token, or (`every`) [tokens, vocab] of all; for
        input [beams, tokens], [beams, vocab]."""
        assert self._kv is not None
        kwargs = {self._cache_arg: self._kv}
        lora = self.running[0].request.lora
        model = self.model
        if lora is not None:
            model = self._peft
            model.set_adapter(lora)
        batch = input_ids if input_ids.dim() == 2 else input_ids[None]
        out = model(input_ids=batch, use_cache=True, logits_to_keep=0 if every else 1,
                    **kwargs)
        self._cached += input_ids.shape[-1]
        return out.logits[0] if every else out.logits[:, -1]

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        if self._take_aborts(outputs):
            self._retire()
        if not self.running:
            if not self.waiting:
                return outputs
            seq = self.waiting.popleft()
            seq.slot = 0
            self.running.append(seq)
            if seq.request.params.beam_width > 1:
                self._beam_step(seq, outputs)
                return outputs
            logits = self._prefill(seq)
        elif self._search is not None:
            self._beam_step(self.running[0], outputs)
            return outputs
        elif self._cached == self._recompute_at:  # the sequence passes it with this token
            seq = self.running[0]
            self._kv = DynamicCache(config=self.model.config)
            self._cached = 0
            tokens = (*seq.request.prompt_token_ids, *seq.output)
            logits = self._forward(torch.tensor(tokens, device=self.device))
        else:
            seq = self.running[0]
            logits = self._forward(self._last_tokens([seq]))
        self._emit(logits, seq, outputs)
        if seq.finished:
            self._retire()
        return outputs

    def _prefill(self, seq: RequestState) -> torch.Tensor:
        """The prompt's KV into a fresh cache, and the logits of its first token. A child of
        an n > 1 request whose sibling prefilled already starts from a copy of that cache
        (engines.core.children: the prompt is prefilled once per family)."""
        rid = seq.request.request_id
        self._forks = {r: f for r, f in self._forks.items() if r in self._live}  # aborted
        fork = self._forks.get(rid)
        siblings = any(s.request.request_id == rid for s in self.waiting)
        if fork is not None:
            kv, logits, cached, entries = fork
            self._kv, self._cached = copy.deepcopy(kv), cached
            seq.prompt_logprobs = list(entries)
            self.forked_prefills += 1
            if not siblings:
                del self._forks[rid]
            return logits.clone()  # each child's sampling gets its own
        self._kv = DynamicCache(config=self.model.config)
        k = seq.request.params.prompt_logprobs
        if k:  # the whole prompt's logits, teacher-forced, in the same forward
            every = self._forward(self._prompt_tensor(seq), every=True)
            seq.prompt_logprobs = list(whole_prompt(every, seq.request.prompt_token_ids, k))
            logits = every[-1:]
        else:
            logits = self._forward(self._prompt_tensor(seq))
        if siblings:
            self._forks[rid] = (copy.deepcopy(self._kv), logits, self._cached,
                                tuple(seq.prompt_logprobs))
        return logits

    def _emit(self, logits: torch.Tensor, seq: RequestState, outputs: list[StepOutput]) -> None:
        # The constraint mask built id by id for its one row (engines.core.constraints): the
        # batched engines' builder is what parity with this reference tests.
        tokens, tops, logprobs = sample(
            logits, [seq], masks=lambda seqs, vocab, device: row_mask(seqs[0], vocab, device),
            processed_tops=self.CAPABILITIES.logprobs_of == "processed")
        outputs.append(seq.append(tokens[0], tops[0], logprobs[0]))
        if seq.finished:
            self._finish(seq)

    def _retire(self) -> None:
        self.running.clear()
        self._kv = None
        self._cached = 0
        self._search = None

    # --- beam search (engines.core.beams) -------------------------------------------------------

    def _beam_step(self, seq: RequestState, outputs: list[StepOutput]) -> None:
        """One step of the running request's search: its prefill, or one token of every beam
        (the beams are the cache's batch rows; recomputed whole where long RoPE switches)."""
        search = self._search
        if search is None:
            search = self._search = self.beam_search(seq.request.params)
            self._kv = DynamicCache(config=self.model.config)
            logits = self._forward(self._prompt_tensor(seq))
        elif self._cached == self._recompute_at:
            self._kv = DynamicCache(config=self.model.config)
            self._cached = 0
            prompt = seq.request.prompt_token_ids
            logits = self._forward(torch.tensor([(*prompt, *b) for b in search.beams],
                                                device=self.device))
        else:
            logits = self._forward(torch.tensor([[b[-1]] for b in search.beams],
                                                device=self.device))
        rows = search.advance(F.log_softmax(logits.float(), dim=-1))
        if not search.done:
            assert self._kv is not None
            self._kv.reorder_cache(torch.tensor(rows, device=self.device))  # type: ignore[arg-type]
            return
        family = list(self._live[seq.request.request_id])
        for child, best in zip(family, search.results(), strict=True):
            if child is not seq:
                self.waiting.remove(child)
            outputs.append(child.finish_beam(best.tokens, best.finish_reason))
            self._finish(child)
        self._retire()


# The reference at the precision engines are deployed at: `--reference-engine` for an engine
# that declares it (docs/usage.md, "Parity at the precision an engine runs at"). Against the
# fp32 reference, a bf16 engine's own roundings move tokens no batching touched.
def sequential_bf16() -> SequentialEngine:
    """The reference engine in bfloat16 (weights, compute and KV cache)."""
    return SequentialEngine(dtype="bfloat16")


def sequential_fp16() -> SequentialEngine:
    """The reference engine in float16 (weights, compute and KV cache; torch runs it on a CPU
    too)."""
    return SequentialEngine(dtype="float16")


class ProcessedSequentialEngine(SequentialEngine):
    """The reference whose top logprobs are of the processed distribution (logprobs_of
    "processed"): what tie-aware parity needs to judge a repetition-penalized choice at
    reduced precision (engines.testing.judging.processed), as the penalty divides a positive
    logit and multiplies a negative one, a sign raw logprobs do not carry."""

    CAPABILITIES = dataclasses.replace(SequentialEngine.CAPABILITIES, logprobs_of="processed")

    def independent_twin(self) -> None:
        """None: the independent reference's top logprobs are raw, and the suite reads this
        one's as processed."""
        return None


def processed_bf16() -> ProcessedSequentialEngine:
    """The processed-logprobs reference in bf16, for an engine run in bf16 under tie-aware
    parity: `--reference-engine engines.sequential:processed_bf16`."""
    return ProcessedSequentialEngine(dtype="bfloat16")
