"""The continuous engine's batch-invariant bf16 forward, measured: one prompt's logits (every
prompt position, then greedy decodes) served alone are bitwise equal to its logits when it
is admitted beside other prompts, into a later slot, beside decode rows of other lengths
(the plain forward pads those to the longest), whatever the step's size. The plain bf16
forward is the control."""

from __future__ import annotations

import pytest
import torch

from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.forward import SlotForward
from tests.helpers import make_prompts

PROMPT = make_prompts([45], seed=3)[0]
DECODES = 5


def _engine(batch_invariant: bool) -> ContinuousBatchEngine:
    return ContinuousBatchEngine(dtype="bfloat16", batch_invariant=batch_invariant,
                                 max_batch_size=24)


def _serve(engine: ContinuousBatchEngine, others: list[int], *, same_step: bool) -> torch.Tensor:
    """Admit prompts of `others`' lengths (slots 0..), then PROMPT (admitted in their step,
    or the next while they decode), then decode every row DECODES times: PROMPT's logits at
    every prompt position and each decode."""
    run: SlotForward = engine.runner
    cache = engine.cache
    cache.reset()
    for _ in range(len(others) + 1):
        cache.allocate()
    prompts = [(slot, torch.tensor(p)) for slot, p in enumerate(make_prompts(others, seed=5))]
    mine = len(others)
    every = {mine: torch.empty(0)}
    empty = torch.zeros(0, dtype=torch.long)
    if same_step:
        logits = run.mixed(empty, [*prompts, (mine, torch.tensor(PROMPT))], cache, every=every)
    else:
        logits = run.mixed(empty, prompts, cache) if prompts else empty
        logits = run.mixed(logits.float().argmax(-1), [(mine, torch.tensor(PROMPT))], cache,
                           every=every)
    out = [every[mine]]
    for _ in range(DECODES):
        logits = run.decode(logits.float().argmax(-1), cache)
        out.append(logits[mine:].clone())
    return torch.cat(out)


CASES = {
    "beside 3 prompts, one step": ([20, 21, 22], True),
    "beside 15 decode rows": ([3 + i for i in range(15)], False),
    "beside a long decode row": ([90], False),
    "beside 20 prompts, one step": ([5 * i + 1 for i in range(20)], True),
}


@pytest.fixture(scope="module")
def invariant() -> ContinuousBatchEngine:
    return _engine(True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_bitwise_those_of_the_prompt_alone(invariant: ContinuousBatchEngine,
                                                      case: str) -> None:
    others, same_step = CASES[case]
    alone = _serve(invariant, [], same_step=True)
    got = _serve(invariant, others, same_step=same_step)
    assert got.dtype == torch.bfloat16 and got.shape == alone.shape
    differ = (got != alone).any(-1).nonzero().flatten().tolist()
    assert not differ, (f"{case}: positions {differ} differ from the prompt alone (largest "
                        f"{(got.float() - alone.float()).abs().max().item():.4g})")


def test_the_plain_bf16_forward_is_not_invariant() -> None:
    """The control: the plain decode pads every row to the longest one's keys."""
    plain = _engine(False)
    alone = _serve(plain, [], same_step=True)
    assert not torch.equal(_serve(plain, [90], same_step=False), alone)


def test_the_engine_declares_it() -> None:
    caps = _engine(True).capabilities()
    assert (caps.dtype, caps.batch_invariant) == ("bfloat16", True)
    assert _engine(False).capabilities().batch_invariant is False
