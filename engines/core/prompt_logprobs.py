"""Prompt logprobs (SamplingParams.prompt_logprobs): one entry per prompt position, None at
position 0 (nothing predicts it), else the prompt token's logprob and the k most likely ids',
of the model's raw distribution given the prompt before it (vLLM's semantics).

Built here, from the logits an engine's own forward computed at prompt positions, so every
engine of ours turns logits into entries the same way; the oracle is elsewhere (a plain
teacher-forced transformers forward, tests/engines/core/test_prompt_logprobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

Entry = Mapping[int, float] | None


def prompt_entries(logits: torch.Tensor, targets: Sequence[int], k: int) -> list[dict[int, float]]:
    """Entries for the tokens `targets`, logits[i] being the model's prediction of targets[i]
    ([len(targets), vocab]): each the k most likely ids and the target's own logprob."""
    if not targets:
        return []
    raw = torch.log_softmax(logits.float(), dim=-1)
    index = torch.tensor(list(targets), device=logits.device)[:, None]
    own = raw.gather(1, index).flatten().tolist()
    values, ids = raw.topk(k, dim=-1)
    out = []
    for target, mine, row_ids, row_values in zip(targets, own, ids.tolist(), values.tolist(),
                                                  strict=True):
        entry = dict(zip(row_ids, row_values, strict=True))
        entry.setdefault(int(target), mine)
        out.append(entry)
    return out


def whole_prompt(logits: torch.Tensor, prompt: Sequence[int], k: int) -> tuple[Entry, ...]:
    """The request's whole prompt_logprobs from logits at prompt positions 0..len-2
    ([len(prompt) - 1, vocab] or more rows; extra rows, such as the last position's, ignored)."""
    return (None, *prompt_entries(logits[: len(prompt) - 1], prompt[1:], k))
