"""Engines whose steps carry several tokens a row, as a speculating engine's do: the
sequential reference run `K` of its own steps per step() with each request's outputs merged
into one, so the suite's recorder and checks meet multi-token steps end to end on an engine
whose tokens are right (the control), and on one that drops a token of each run (the bug a
speculating engine has when it loses the bonus token)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from engines.protocol import StepOutput
from engines.sequential import SequentialEngine

__all__ = ["DropsSecondOfRun", "MultiTokenSteps"]

K = 3  # inner steps per step(): runs of up to 3 tokens, like k = 2 drafts + the bonus


def _join(a: StepOutput, b: StepOutput) -> StepOutput:
    def cat(x: tuple | None, y: tuple | None) -> tuple | None:  # type: ignore[type-arg]
        return None if x is None and y is None else (*(x or ()), *(y or ()))
    text = None if a.text is None and b.text is None else (a.text or "") + (b.text or "")
    return replace(a, token_ids=(*a.token_ids, *b.token_ids), finish_reason=b.finish_reason,
                   top_logprobs=cat(a.top_logprobs, b.top_logprobs),
                   logprobs=cat(a.logprobs, b.logprobs), text=text)


class MultiTokenSteps(SequentialEngine):
    """Correct: the same tokens as the reference, up to K of them a row per step."""

    name = "multi-token-steps"

    def _run(self, out: StepOutput) -> StepOutput:
        return out

    def step(self) -> list[StepOutput]:
        merged: dict[tuple[Hashable, int], StepOutput] = {}
        for _ in range(K):
            if not self.has_work():
                break
            for out in super().step():
                key = (out.request_id, out.index)
                merged[key] = _join(merged[key], out) if key in merged else out
        return [self._run(o) for o in merged.values()]


class DropsSecondOfRun(MultiTokenSteps):
    """Planted: a run of two or more tokens loses its second (an accepted run's bonus token
    dropped), while the logprobs still count every token."""

    name = "drops-second-of-run"
    caught_by = "parity"

    def _run(self, out: StepOutput) -> StepOutput:
        if len(out.token_ids) < 2:
            return out
        return replace(out, token_ids=(out.token_ids[0], *out.token_ids[2:]))
