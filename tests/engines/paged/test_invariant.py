"""The paged engine's batch-invariant bf16 forward, measured: one prompt's logits (every prompt
position, then greedy decodes) served alone in one chunk are bitwise equal to its logits when
chunked at other boundaries, token by token, and beside other rows that put its tokens at
every position of a tile and in steps of many sizes. The plain bf16 forward is the control:
chunking alone moves its logits."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
import torch

from engines.core.invariant import TILE
from engines.paged.engine import PagedEngine
from engines.paged.forward import PagedForward, Row
from tests.helpers import make_prompts

PROMPT = make_prompts([45], seed=3)[0]
DECODES = 4


def _runner(batch_invariant: bool) -> PagedForward:
    engine = PagedEngine(dtype="bfloat16", batch_invariant=batch_invariant, num_blocks=400)
    return engine.runner


@pytest.fixture(scope="module")
def invariant() -> PagedForward:
    return _runner(True)


class _Blocks:
    """Fresh block ids for each request (the pool is only written, never shared here)."""

    def __init__(self, bs: int) -> None:
        self.bs, self.next = bs, 0

    def take(self, tokens: int) -> list[int]:
        n = -(-tokens // self.bs)
        self.next += n
        return list(range(self.next - n, self.next))

    def reset(self) -> None:
        self.next = 0


Others = Callable[[_Blocks], list[Row]]


def _serve(run: PagedForward, chunks: Sequence[int], others: Others) -> torch.Tensor:
    """PROMPT computed in `chunks`, then DECODES greedy decodes, each step beside `others`
    (rows put before it in the step): the logits of every prompt position and decode."""
    blocks = _Blocks(run.block_size)
    mine = blocks.take(len(PROMPT) + DECODES)
    tokens, at = list(PROMPT), 0
    out: list[torch.Tensor] = []
    spans = []
    for size in chunks:
        spans.append((at, tokens[at : at + size]))
        at += size
    assert at == len(PROMPT)
    for d in range(len(spans) + DECODES):
        if d < len(spans):
            start, span = spans[d]
            row = Row(span, start, mine, True, logits_at=range(len(span)))
        else:
            tokens.append(int(out[-1][-1].float().argmax()))
            row = Row(tokens[-1:], len(tokens) - 1, mine, True)
        before = others(blocks)
        logits = run.forward([*before, row])
        skip = sum(len(r.logit_offsets()) for r in before)
        out.append(logits[skip:].clone())
    return torch.cat(out)


def _prompts(lengths: Sequence[int], *, decoding: bool = False) -> Others:
    """Rows of other requests: prompts of these lengths (or, `decoding`, one-token rows at
    those positions), fresh blocks each step."""
    stream: Iterator[tuple[int, ...]] = iter(make_prompts(list(lengths) * 20, seed=4))

    def make(blocks: _Blocks) -> list[Row]:
        rows = []
        for n in lengths:
            p = next(stream)
            if decoding:
                rows.append(Row(p[-1:], n - 1, blocks.take(n), True))
            else:
                rows.append(Row(p, 0, blocks.take(n), True))
        return rows

    return make


def _alone(blocks: _Blocks) -> list[Row]:
    return []


# (what the prompt shares its steps with, how it is chunked): the prompt's tokens land at
# other tile positions (the tokens before it in a step) in steps of other sizes.
CASES = {
    "chunked 5/17/23": ([5, 17, 23], _alone),
    "token by token": ([1] * len(PROMPT), _alone),
    "beside 3 prompts": ([len(PROMPT)], _prompts([20, 21, 22])),
    "beside 1 decode row": ([16, 29], _prompts([30], decoding=True)),
    "beside a full tile of decodes": ([30, 15], _prompts([9] * (TILE - 1), decoding=True)),
    "beside 7 long prompts": ([30, 15], _prompts([60, 61, 62, 63, 64, 65, 66])),
    "beside 37 tokens": ([45], _prompts([37])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_bitwise_those_of_the_prompt_alone(invariant: PagedForward,
                                                      case: str) -> None:
    chunks, others = CASES[case]
    alone = _serve(invariant, [len(PROMPT)], _alone)
    got = _serve(invariant, chunks, others)
    assert got.dtype == torch.bfloat16 and got.shape == alone.shape
    differ = (got != alone).any(-1).nonzero().flatten().tolist()
    assert not differ, (f"{case}: positions {differ} differ from the prompt alone (largest "
                        f"{(got.float() - alone.float()).abs().max().item():.4g})")


def test_the_plain_bf16_forward_is_not_invariant() -> None:
    """The control: what the invariant forward is for. The plain forward's chunks attend
    through ATen's SDPA, blocked by the chunk, so a chunked prompt rounds otherwise."""
    plain = _runner(False)
    alone = _serve(plain, [len(PROMPT)], _alone)
    assert not torch.equal(_serve(plain, [5, 17, 23], _alone), alone)


def test_the_engine_declares_it_and_refuses_a_compiled_step() -> None:
    caps = PagedEngine(dtype="bfloat16", batch_invariant=True).capabilities()
    assert (caps.dtype, caps.batch_invariant) == ("bfloat16", True)
    assert PagedEngine(dtype="bfloat16").capabilities().batch_invariant is False
    with pytest.raises(ValueError, match=r"^compiled: 'step' with batch_invariant=True"):
        PagedEngine(batch_invariant=True, compiled="step")
