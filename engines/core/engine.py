"""What every reference engine shares: model set-up, validation, the queue, aborts.

Subclasses write `step()` only: the scheduling policy is the whole difference between them.
`EngineCore` holds what every engine shares; `engines.core.slots.BaseEngine` adds the
SlotIntrospection bookkeeping of the engines with slots (an engine without such slots, the
paged one, must not offer those members: the protocol check is structural).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import torch
from torch import nn

from engines.core.children import child_requests
from engines.core.detokenize import IncrementalText, load_tokenizer
from engines.core.guided import Grammars
from engines.core.request_state import RequestState
from engines.core.sampling import make_generator
from engines.core.validation import check_request
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
    Request,
    StepOutput,
)
from engines.threads import torch_threads
from engines.tokenizer import tokenizer_for

ModelSpec = str | Path | nn.Module
S = TypeVar("S", bound=RequestState)  # an engine's per-request state


class EngineCore(Generic[S]):
    """Implements Engine and Abortable bookkeeping: model, validation, queue; not the schedule."""

    name = "base"
    # What every engine of ours declares whatever it was built with (capabilities() adds what
    # the instance says: its preset's thresholds, its tokenizer, its model's dtype). Every
    # token-choice field, per row (engines.core.sampling), and the constraints
    # (engines.core.constraints; guided through engines.core.guided); stop strings and the
    # streamed text (engines.core.detokenize); top logprobs are raw. A subclass narrows or
    # widens it with dataclasses.replace (its expected_failed_checks: the properties it
    # knowingly breaks, with the reason, which the suite makes strict xfails).
    CAPABILITIES: ClassVar[Capabilities] = Capabilities(
        supported_sampling=BASE_PARAMS | PROCESSING_PARAMS | CONSTRAINT_PARAMS | TEXT_PARAMS,
        logprobs_of="raw")
    # Capabilities.batch_invariant for this instance: set by an engine built in its
    # batch-invariant mode (engines.core.invariant), whose rows compute the same bits in any
    # batch.
    batch_invariant: bool = False

    def __init__(
        self,
        model: ModelSpec = DEFAULT_PRESET,
        *,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        max_batch_size: int = 8,
        max_model_len: int | None = None,
        seed: int = 0,
    ) -> None:
        self.device = torch.device(device)
        self.model: Any  # a transformers causal LM
        if isinstance(model, nn.Module):
            self.model = model
        else:
            self.model = load_model(model, seed=seed, device=self.device, dtype=parse_dtype(dtype))
        config: Any = self.model.config
        self.vocab_size: int = config.vocab_size
        default_len = preset_max_model_len(model) if not isinstance(model, nn.Module) else None
        limit = config.max_position_embeddings
        self.max_model_len: int = max_model_len or default_len or min(limit, 4096)
        if not 1 <= self.max_model_len <= limit:
            raise ValueError(f"max_model_len: {self.max_model_len} must be in 1..{limit}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size: must be >= 1, got {max_batch_size}")
        self.max_batch_size: int = max_batch_size
        # Capabilities.position_thresholds: the preset's window or RoPE threshold, which the
        # suite's workloads then cross.
        self._thresholds: dict[str, int] = preset_thresholds(model)
        # A checkpoint directory's own tokenizer where it has one; else the presets' BPE of
        # this vocabulary (engines.tokenizer), trained once when first read.
        own = Path(model) if isinstance(model, str | Path) else None
        self._tokenizer_dir = (str(own) if own is not None and (own / "tokenizer.json").is_file()
                               else None)
        self._grammar_compiler: Grammars | None = None
        self._dtype_name: str | None = None  # the model's, as capabilities() states it
        self.waiting: deque[S] = deque()
        self.running: list[S] = []  # admitted, in admission order (slot engines: index == slot)
        # Every unfinished request: its unfinished children (one, unless n > 1), by its id.
        self._live: dict[Hashable, list[S]] = {}
        self._aborts = 0  # abort_pending requests not yet retired

    # --- Engine -------------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        self._check(request)
        params = request.params
        # Compiled before any state changes: a grammar that does not compile is bad input.
        matchers = [None if params.guided is None else self._grammars().matcher(params.guided)
                    for _ in range(params.n)]
        family = []
        for index, child in enumerate(child_requests(request)):  # n > 1: engines.core.children
            seed = child.params.seed
            gen = make_generator(seed, self.device) if params.temperature > 0 else None
            seq = self._new_state(child, gen)
            seq.index = index
            seq.matcher = matchers[index]
            # Every request streams its text: the tokenizer is declared, so text is promised.
            seq.detok = IncrementalText(load_tokenizer(self._tokenizer()), params.stop,
                                        params.include_stop_str_in_output)
            family.append(seq)
        self._live[request.request_id] = family
        self.waiting.extend(family)

    def _check(self, request: Request) -> None:
        """Raise InvalidRequest for bad input, before any state changes."""
        check_request(
            request,
            vocab_size=self.vocab_size,
            max_model_len=self.max_model_len,
            in_flight=self._live,
            supported=self.CAPABILITIES.supported_sampling,
        )

    def _new_state(self, request: Request, generator: torch.Generator | None) -> S:
        raise NotImplementedError

    def has_work(self) -> bool:
        return bool(self._live)

    # --- declared (engines.bench.describe) ----------------------------------------------------

    def _grammars(self) -> Grammars:
        if self._grammar_compiler is None:
            self._grammar_compiler = Grammars(self._tokenizer(), self.vocab_size)
        return self._grammar_compiler

    def capabilities(self) -> Capabilities:
        """What this engine supports (engines.protocol.Capabilities): the class's CAPABILITIES
        with this instance's thresholds, tokenizer and model dtype."""
        if self._dtype_name is None:  # read once: capabilities() is read every step
            self._dtype_name = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        dtype = self._dtype_name
        return dataclasses.replace(self.CAPABILITIES, position_thresholds=self._thresholds,
                                   tokenizer=self._tokenizer(),
                                   dtype=dtype if dtype in DTYPES else "float32",
                                   batch_invariant=(self.CAPABILITIES.batch_invariant
                                                    or self.batch_invariant))

    def _tokenizer(self) -> str:
        """Capabilities.tokenizer: the directory of this vocabulary's tokenizer.json."""
        if self._tokenizer_dir is None:
            self._tokenizer_dir = tokenizer_for(self.vocab_size)
        return self._tokenizer_dir

    @property
    def compute_threads(self) -> int | None:
        return torch_threads(self.device)

    @property
    def execution(self) -> str:
        return f"torch {torch.__version__.split('+')[0]} eager on {self.device.type}"

    def step(self) -> list[StepOutput]:
        raise NotImplementedError

    # --- Abortable ----------------------------------------------------------------------------

    def abort_request(self, request_id: Hashable) -> None:
        try:
            family = self._live.get(request_id, [])
        except TypeError:  # unhashable: cannot be a known id
            return
        for seq in family:
            if not seq.abort_pending:
                seq.abort_pending = True
                self._aborts += 1

    # --- shared mechanics ---------------------------------------------------------------------

    def _prompt_tensor(self, seq: RequestState) -> torch.Tensor:
        return torch.tensor(seq.request.prompt_token_ids, device=self.device)

    def _last_tokens(self, seqs: Sequence[RequestState]) -> torch.Tensor:
        return torch.tensor([seq.output[-1] for seq in seqs], dtype=torch.long, device=self.device)

    def _finish(self, seq: RequestState) -> None:
        rid = seq.request.request_id
        family = self._live[rid]
        family.remove(seq)  # type: ignore[arg-type]
        if not family:
            del self._live[rid]

    def _states(self) -> list[S]:
        """Every unfinished request's unfinished children."""
        return [seq for family in self._live.values() for seq in family]

    def _take_aborts(self, outputs: list[StepOutput]) -> list[S]:
        """Emit ABORT for every pending abort; drop waiting ones; return those holding a slot."""
        if not self._aborts:
            return []
        self._aborts = 0
        in_slots = [seq for seq in self.running if seq.abort_pending and not seq.finished]
        for seq in [s for s in self.waiting if s.abort_pending]:
            self.waiting.remove(seq)
            outputs.append(seq.abort())
            self._finish(seq)
        for seq in in_slots:
            outputs.append(seq.abort())
            self._finish(seq)
        return in_slots

