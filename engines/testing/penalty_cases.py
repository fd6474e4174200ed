"""A seed workload for the penalties' hard cases (issue 52): greedy requests whose repetition
penalty, presence penalty or min_tokens changes the tokens in a way only the right rule
gives, built from each prompt's own greedy continuation.

- a repetition penalty over a prompt that ends with its own continuation: what the request
  would say is in the prompt, so only a penalty that reaches the prompt moves it (a penalty
  over the output alone leaves its first token);
- a presence penalty where the greedy continuation repeats a token: the sign decides whether
  the repeat goes or stays;
- min_tokens whose stop ids list the request's greedy first token last: a hold that lets the
  last listed id through ends the request at once.

Drawn requests reach these only by chance (a penalty over a prompt that happens to hold what
the model would say next), so a bug in the rule itself, made alike by an engine and a
reference that share its code, was caught in some runs and not others; here every run meets
them, judged by parity and by the reference (engines.testing.routing sends them to an
independent reference by default).
"""

from __future__ import annotations

from collections.abc import Sequence

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Make
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["LABEL", "penalty_cases"]

LABEL = "penalties on the request's own continuation"
_PROMPTS = ((5, 17, 300, 42), (811, 9, 77))
_OWN = 8  # tokens of each prompt's greedy continuation read


def penalty_cases(limits: EngineLimits, req: Make, alone: AloneFn) -> Workload | None:
    """Per prompt, a request under each penalty the engines compared declare (None: none
    declared, or the context too short for a prompt and its continuation)."""
    fields = limits.sampling_fields
    wanted = {"repetition_penalty", "presence_penalty", "min_tokens"} & fields
    budget = _OWN + 2
    if not wanted or limits.max_model_len < 2 * (max(map(len, _PROMPTS)) + budget):
        return None
    reqs: list[Request] = []
    for raw in _PROMPTS:
        prompt = tuple(t % limits.vocab_size for t in raw)
        own: Sequence[int] = tuple(alone(prompt, SamplingParams(max_tokens=_OWN)))
        if "repetition_penalty" in wanted:
            reqs.append(req(len(reqs), (*prompt, *own), budget, repetition_penalty=2.0))
        if "presence_penalty" in wanted:
            reqs.append(req(len(reqs), prompt, budget, presence_penalty=1.5))
        if "min_tokens" in wanted and len(own) > 5:
            reqs.append(req(len(reqs), prompt, _OWN, min_tokens=4,
                            stop_token_ids=tuple(dict.fromkeys((own[5], own[0])))))
    return Workload(tuple(reqs), tuple(i // 2 for i in range(len(reqs))), label=LABEL)
