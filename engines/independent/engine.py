"""The independent reference engine: one request at a time, each served whole by
engines.independent.generate in the step that takes it, its children (n > 1) or beams in
that step too, one output each."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engines.core.lora import LoraNames
from engines.core.validation import check_request
from engines.independent.generate import beams, generate, prompt_logprobs
from engines.independent.grammar import compile_grammar
from engines.independent.text import cut_text
from engines.models import (
    DEFAULT_PRESET,
    load_model,
    parse_dtype,
    preset_max_model_len,
    preset_thresholds,
)
from engines.protocol import (
    BASE_PARAMS,
    CONSTRAINT_PARAMS,
    DTYPES,
    PROCESSING_PARAMS,
    TEXT_PARAMS,
    Capabilities,
    FinishReason,
    InvalidRequest,
    Request,
    SamplingParams,
    StepOutput,
)
from engines.tokenizer import tokenizer_for

__all__ = ["IndependentEngine"]

_OFF = SamplingParams()
# What a beam request may set: generate's beam search is greedy over the raw logprobs.
_BEAM_FIELDS = frozenset({"max_tokens", "stop_token_ids", "n", "beam_width", "length_penalty",
                          "min_tokens"})


class IndependentEngine:
    """Engine, Abortable and LoRAManagement (engines.protocol), one request at a time."""

    name = "independent"
    CAPABILITIES = Capabilities(
        supported_sampling=BASE_PARAMS | PROCESSING_PARAMS | CONSTRAINT_PARAMS | TEXT_PARAMS
        | {"lora", "cache_salt", "prompt_logprobs", "n", "beam_width", "length_penalty"},
        logprobs_of="raw", max_concurrency=1)

    def __init__(self, model: str | Path | nn.Module = DEFAULT_PRESET, *,
                 device: str | torch.device = "cpu", dtype: str | torch.dtype = torch.float32,
                 max_model_len: int | None = None, seed: int = 0,
                 loras: Mapping[str, str | Path] | None = None) -> None:
        self.device = torch.device(device)
        self.model: Any = (model if isinstance(model, nn.Module) else
                           load_model(model, seed=seed, device=self.device,
                                      dtype=parse_dtype(dtype)))
        config: Any = self.model.config
        self.vocab_size: int = config.vocab_size
        limit = config.max_position_embeddings
        default = None if isinstance(model, nn.Module) else preset_max_model_len(model)
        self.max_model_len: int = max_model_len or default or min(limit, 4096)
        if not 1 <= self.max_model_len <= limit:
            raise ValueError(f"max_model_len: {self.max_model_len} must be in 1..{limit}")
        self._thresholds = preset_thresholds(model)
        own = Path(model) if isinstance(model, str | Path) else None
        self._tokenizer_dir = (str(own) if own is not None and (own / "tokenizer.json").is_file()
                               else tokenizer_for(self.vocab_size))
        self._hf_tok: Any = None  # transformers' tokenizer (stop strings), on first use
        self._ll_tok: Any = None  # llguidance's (grammars), on first use
        self._text_tok: Any = None  # `tokenizers`' (the text), on first use
        self._loras = LoraNames(loras)
        self._peft: Any = None  # a PeftModel over a copy of the model, once an adapter is
        for name, path in self._loras.paths.items():
            self._load_lora(name, path)
        self._queue: deque[Request] = deque()
        self._aborted: set[Hashable] = set()

    # --- declarations ---------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        return Capabilities(
            supported_sampling=self.CAPABILITIES.supported_sampling,
            logprobs_of="raw", max_concurrency=1, position_thresholds=self._thresholds,
            tokenizer=self._tokenizer_dir, dtype=dtype if dtype in DTYPES else "float32")

    @property
    def loras(self) -> dict[str, str]:
        return dict(self._loras.paths)

    # --- Engine and Abortable -------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        check_request(request, vocab_size=self.vocab_size, max_model_len=self.max_model_len,
                      in_flight={r.request_id for r in self._queue},
                      supported=self.CAPABILITIES.supported_sampling)
        self._loras.check_request(request)
        p = request.params
        if p.beam_width > 1:
            for name in SamplingParams.__dataclass_fields__:
                if name not in _BEAM_FIELDS and getattr(p, name) != getattr(_OFF, name):
                    raise InvalidRequest(f"{name}: {getattr(p, name)!r} is not supported with "
                                         f"beam search (beam_width {p.beam_width})")
        if p.guided is not None:  # a grammar that does not compile is bad input
            compile_grammar(p.guided, self._llguidance(), self.vocab_size)
        self._queue.append(request)

    def has_work(self) -> bool:
        return bool(self._queue)

    def abort_request(self, request_id: Hashable) -> None:
        try:
            if any(r.request_id == request_id for r in self._queue):
                self._aborted.add(request_id)
        except TypeError:  # unhashable: cannot be a known id
            return

    def step(self) -> list[StepOutput]:
        outputs: list[StepOutput] = []
        for r in [r for r in self._queue if r.request_id in self._aborted]:
            self._queue.remove(r)
            self._aborted.discard(r.request_id)
            outputs += [StepOutput(r.request_id, (), FinishReason.ABORT, index=i)
                        for i in range(r.params.n)]
        if self._queue:
            outputs += self._serve(self._queue.popleft())
        return outputs

    # --- serving ----------------------------------------------------------------------------------

    def _serve(self, r: Request) -> list[StepOutput]:
        p, rid = r.params, r.request_id
        model = self._model_for(r)
        prompt = r.prompt_token_ids
        if p.beam_width > 1:
            return [StepOutput(rid, tokens, reason, index=i, text=self._decode(tokens))
                    for i, (tokens, reason) in enumerate(beams(model, prompt, p))]
        entries = prompt_logprobs(model, prompt, p.prompt_logprobs) if p.prompt_logprobs else None
        outputs = []
        for i in range(p.n):
            # Child i of a request seeded s samples under seed s + i (the protocol's rule).
            seed = None if p.seed is None else p.seed + i
            grammar = (None if p.guided is None else
                       compile_grammar(p.guided, self._llguidance(), self.vocab_size))
            got = generate(model, prompt, p, seed=seed, grammar=grammar,
                           hf_tokenizer=self._transformers_tokenizer() if p.stop else None)
            text = cut_text(self._decode, got.tokens, p.stop, p.include_stop_str_in_output,
                            got.stopped_by_string)
            outputs.append(StepOutput(rid, got.tokens, got.finish_reason, got.top_logprobs,
                                      got.logprobs, index=i, prompt_logprobs=entries, text=text))
        return outputs

    def _decode(self, tokens: tuple[int, ...] | list[int]) -> str:
        if self._text_tok is None:
            from tokenizers import Tokenizer

            self._text_tok = Tokenizer.from_file(str(Path(self._tokenizer_dir)
                                                     / "tokenizer.json"))
        return str(self._text_tok.decode(list(tokens), skip_special_tokens=True))

    def _transformers_tokenizer(self) -> Any:
        if self._hf_tok is None:
            from transformers import PreTrainedTokenizerFast

            self._hf_tok = PreTrainedTokenizerFast.from_pretrained(self._tokenizer_dir)
        return self._hf_tok

    def _llguidance(self) -> Any:
        if self._ll_tok is None:
            from llguidance.hf import from_tokenizer

            self._ll_tok = from_tokenizer(self._transformers_tokenizer(),
                                          n_vocab=self.vocab_size)
        return self._ll_tok

    # --- LoRA (PEFT) ------------------------------------------------------------------------------

    def _model_for(self, r: Request) -> Any:
        if r.lora is None:
            return self.model
        self._peft.set_adapter(r.lora)
        return self._peft

    def _load_lora(self, name: str, path: str) -> None:
        from peft import PeftModel

        if self._peft is None:  # PEFT wraps modules in place: over a copy of the shared model
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
        self._loras.check_removable(name, [r.request_id for r in self._queue if r.lora == name])
        del self._loras.paths[name]
        if self._loras.paths:
            self._peft.delete_adapter(name)
        else:  # PEFT keeps at least one adapter: drop the wrapped copy
            self._peft = None
