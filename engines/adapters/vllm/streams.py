"""vLLM's RequestOutputs turned into the protocol's StepOutputs, per child.

vLLM (0.32.0, the default CUMULATIVE output kind) returns, per step, one RequestOutput per
child that advanced (n > 1: children are requests of their own inside the engine, each output
carrying one CompletionOutput with its `index`), with each child's tokens, logprobs and text so
far. A Family keeps, per child, what was already returned, and hands out the rest:
- tokens, top logprobs and the sampled tokens' logprobs: the part not yet returned;
- text: vLLM's detokenized text so far (it holds back the tail a stop string could still
  begin in, and cuts the text at a stop string when it ends the request) minus what was
  already returned: the deltas concatenate to vLLM's final text, whatever it did;
- prompt logprobs: on the request's first output, one mapping per prompt position (None at
  position 0), each holding the prompt token and vLLM's top k;
- guided requests: vLLM ends a guided output only on the tokenizer's EOS (its grammar is
  terminated by EOS alone), so where the grammar can go no further the engine's next token
  is a forced EOS; the protocol ends the request at the last grammar token instead (STOP).
  A matcher per child (llguidance, engines.core.guided, over the same tokenizer) says when
  the grammar can go no further; the adapter then finishes the child and aborts it in vLLM.
  It decides only where the output ends, never which tokens it holds: a token vLLM's mask
  should have refused stays in the output for the `constraints` check to judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.core.guided import Matcher
from engines.protocol import FinishReason, Request, StepOutput

__all__ = ["FINISH", "Child", "Family", "top_logprobs"]

FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH,
          "abort": FinishReason.ABORT}


def top_logprobs(positions: Sequence[Mapping[int, Any] | None]
                 ) -> tuple[Mapping[int, float] | None, ...]:
    """vLLM's Logprob mappings as token id -> logprob (None stays None)."""
    return tuple(None if m is None else {int(t): float(lp.logprob) for t, lp in m.items()}
                 for m in positions)


@dataclass(slots=True)
class Child:
    emitted: int = 0  # tokens returned
    text: str = ""  # text returned
    done: bool = False
    matcher: Matcher | None = None  # guided requests: where the grammar ends


@dataclass(slots=True)
class Family:
    """One request's children, and whether its prompt logprobs were returned."""

    request: Request
    key: str
    children: dict[int, Child] = field(default_factory=dict)
    prompt_sent: bool = False

    def child(self, index: int) -> Child:
        return self.children.setdefault(index, Child())

    @property
    def finished(self) -> bool:
        return (len(self.children) == self.request.params.n
                and all(c.done for c in self.children.values()))

    def delta(self, result: Any, completion: Any, text: bool,
              index: int | None = None) -> tuple[StepOutput | None, bool]:
        """The output for one child's CompletionOutput (None: nothing new), and whether the
        adapter ended the child (a guided one whose grammar can go no further) and vLLM must
        be told to abort it. `index`: the child, where vLLM's own index is not it (a greedy
        child sent as a request of its own)."""
        p = self.request.params
        index = int(completion.index) if index is None else index
        kid = self.child(index)
        if kid.done:
            return None, False
        tokens = tuple(int(t) for t in completion.token_ids[kid.emitted:])
        finish = FINISH[completion.finish_reason] if completion.finish_reason else None
        ended = False
        if kid.matcher is not None:
            for k, token in enumerate(tokens):
                stopped = kid.matcher.advance(token)
                if kid.matcher.failed:  # vLLM let a refused token through: leave it be
                    kid.matcher = None
                    break
                if stopped:  # on EOS (vLLM's own end) or where the grammar can go no further
                    # STOP even at the last budgeted token, as the protocol's reference ends
                    # it; vLLM, still running the child, is told to abort it.
                    ended = finish is None
                    tokens, finish = tokens[:k + 1], FinishReason.STOP
                    break
        start = kid.emitted
        kid.emitted += len(tokens)
        delta_text = None
        if text:
            full = completion.text or ""
            delta_text = full[len(kid.text):]
            kid.text = full
        if finish is not None:
            kid.done = True
        elif not tokens and not delta_text:
            return None, False
        tops = sampled = None
        if p.logprobs > 0:
            positions = completion.logprobs or ()
            tops = top_logprobs(positions[start:start + len(tokens)])
            if len(tops) == len(tokens) and all(m is not None and t in m
                                                for t, m in zip(tokens, tops, strict=True)):
                sampled = tuple(m[t] for t, m in zip(tokens, tops, strict=True)
                                if m is not None)
        prompt = None
        if p.prompt_logprobs > 0 and not self.prompt_sent and result.prompt_logprobs:
            prompt = top_logprobs(result.prompt_logprobs)
            self.prompt_sent = True
        out = StepOutput(self.request.request_id, tokens, finish,
                         tops,  # type: ignore[arg-type]
                         sampled, index=index, prompt_logprobs=prompt,
                         text=delta_text)
        return out, ended
