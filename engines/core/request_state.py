"""One request's mutable state inside an engine: its tokens, slot, RNG and finish."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engines.protocol import FinishReason, Request, StepOutput

if TYPE_CHECKING:
    from engines.core.detokenize import IncrementalText
    from engines.core.guided import Matcher


@dataclass(slots=True, eq=False)
class RequestState:
    request: Request
    generator: torch.Generator | None = None  # per request, so batching cannot perturb it
    output: list[int] = field(default_factory=list)
    slot: int = -1  # -1: not holding a slot
    finish_reason: FinishReason | None = None
    abort_pending: bool = False
    # params.prompt_logprobs > 0: the entries so far (engines.core.prompt_logprobs), handed
    # out once, on the request's first output (a preempted request's recompute adds none).
    prompt_logprobs: list[Mapping[int, float] | None] = field(default_factory=list)
    matcher: Matcher | None = None  # guided requests: the grammar's state after `output`
    # The streamed text and stop strings (engines.core.detokenize), for engines with a
    # tokenizer: every StepOutput then carries its delta.
    detok: IncrementalText | None = None
    index: int = 0  # which child of its request (n > 1: engines.core.children)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def append(self, token: int, top: Mapping[int, float] | None,
               logprob: float | None = None) -> StepOutput:
        """Record a sampled token, decide whether it finishes the request, describe the step.
        A stop id ends the request only once min_tokens are out (sampling masks it before)."""
        self.output.append(token)
        params = self.request.params
        prompt = None
        if params.prompt_logprobs and len(self.output) == 1:
            if not self.prompt_logprobs:  # a one-token prompt: its one entry needs no logits
                self.prompt_logprobs.append(None)
            assert len(self.prompt_logprobs) == len(self.request.prompt_token_ids), \
                "prompt logprobs incomplete at the first token"
            prompt = tuple(self.prompt_logprobs)
        # A guided request ends (STOP) when its grammar can go no further.
        done = self.matcher is not None and self.matcher.advance(token)
        # A stop string ends it too (STOP, even at the last budgeted token, as a stop id
        # does); like a stop id, only from token min_tokens + 1 on.
        held = len(self.output) <= params.min_tokens
        if self.detok is not None and self.detok.add(token, check_stop=not held):
            done = True
        if done or token in params.stop_token_ids and len(self.output) > params.min_tokens:
            self.finish_reason = FinishReason.STOP
        elif len(self.output) >= params.max_tokens:
            self.finish_reason = FinishReason.LENGTH
        text = None if self.detok is None else self.detok.delta(final=self.finished)
        return StepOutput(
            self.request.request_id,
            (token,),
            self.finish_reason,
            None if top is None else (top,),
            None if logprob is None else (logprob,),
            index=self.index,
            prompt_logprobs=prompt,
            text=text,
        )

    def finish_beam(self, tokens: tuple[int, ...], reason: FinishReason) -> StepOutput:
        """A beam search's child (engines.core.beams): its beam, whole, in one output."""
        self.output, self.finish_reason = list(tokens), reason
        text = None
        if self.detok is not None:
            for token in tokens:
                self.detok.add(token, check_stop=False)
            text = self.detok.delta(final=True)
        return StepOutput(self.request.request_id, tokens, reason, index=self.index, text=text)

    def abort(self) -> StepOutput:
        self.finish_reason = FinishReason.ABORT
        # What the stream held back (a cut character, a possible stop string's start) is
        # handed out: an aborted request's deltas still add up to the decode of its tokens.
        text = None if self.detok is None else self.detok.delta(final=True)
        return StepOutput(self.request.request_id, (), FinishReason.ABORT, index=self.index,
                          text=text)
