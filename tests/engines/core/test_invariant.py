"""engines.core.invariant's pieces on their own, in bf16: a token's result from the tiled ops
is the same bits at every position of a tile, beside any other tokens and in steps of any
number of tiles; a span's attention is the same whatever other spans the step holds. (The
engines' forwards, measured end to end: tests/engines/paged/test_invariant.py and
tests/engines/slot/test_invariant.py.)"""

from __future__ import annotations

import pytest
import torch

from engines.core.invariant import TILE, Span, TileDecoder, attend_spans, padded
from engines.paged.invariant import InvariantForward
from engines.paged.variants import bf16_invariant


@pytest.fixture(scope="module")
def tiles() -> TileDecoder:
    runner = bf16_invariant().runner
    assert isinstance(runner, InvariantForward)
    return runner.tiled


def _row_everywhere(tiles: TileDecoder, steps: int) -> list[torch.Tensor]:
    """One token's layer-0 results (q, k, v, the layer's output, logits) placed at each
    position of a tile, among `steps` tiles of other random tokens."""
    hidden = tiles.embed_weight.shape[1]
    heads = tiles.heads * tiles.dim
    mine = torch.Generator().manual_seed(0)  # the token, the same in every step
    row = torch.randn(hidden, generator=mine).to(torch.bfloat16)
    attn_row = torch.randn(heads, generator=mine).to(torch.bfloat16)
    gen = torch.Generator().manual_seed(steps)  # the others, new in every step
    outs = []
    for place in range(0, steps * TILE, 3):
        x = torch.randn(steps * TILE, hidden, generator=gen).to(torch.bfloat16)
        attn = torch.randn(steps * TILE, heads, generator=gen).to(torch.bfloat16)
        x[place], attn[place] = row, attn_row
        positions = torch.randint(0, 400, (steps * TILE,), generator=gen)
        positions[place] = 7
        q, k, v = tiles.qkv(0, x, positions)
        after = tiles.finish(0, x, attn)
        logits = tiles.logits(x[: place + 1])
        outs.append(torch.cat([q[place].flatten(), k[place].flatten(), v[place].flatten(),
                               after[place], logits[place]]))
    return outs


def test_a_token_gets_the_same_bits_at_every_place_of_any_step(tiles: TileDecoder) -> None:
    outs = [o for steps in (1, 2, 5) for o in _row_everywhere(tiles, steps)]
    assert outs[0].dtype == torch.bfloat16
    differ = [i for i, o in enumerate(outs) if not torch.equal(o, outs[0])]
    assert not differ, f"placements {differ} of {len(outs)} differ"


def test_a_spans_attention_ignores_the_other_spans(tiles: TileDecoder) -> None:
    gen = torch.Generator().manual_seed(0)
    kvh, d = tiles.kv_heads, tiles.dim
    keys = torch.randn(90, kvh, d, generator=gen).to(torch.bfloat16)
    values = torch.randn(90, kvh, d, generator=gen).to(torch.bfloat16)
    q = torch.randn(64, tiles.heads, d, generator=gen).to(torch.bfloat16)

    def kv(_: int) -> tuple[torch.Tensor, torch.Tensor]:
        return keys, values

    # Positions 40..49 of one request: as one chunk alone, as a chunk beside others, and each
    # token as its own decode row.
    alone = attend_spans(q[:10], [Span(0, 10, 40)], kv, tiles.scale)
    q_beside = torch.cat([q[10:13], q[:10], q[13:43]])
    beside = attend_spans(q_beside, [Span(0, 3, 80), Span(3, 10, 40), Span(13, 30, 5)],
                          kv, tiles.scale)[3:13]
    q_rows = torch.cat([torch.zeros_like(q[:5]), q[:10]])
    decodes = attend_spans(q_rows, [Span(5 + t, 1, 40 + t) for t in range(10)],
                           kv, tiles.scale)[5:]
    assert torch.equal(beside, alone) and torch.equal(decodes, alone)
    assert torch.equal(attend_spans(q_rows, [], kv, tiles.scale), torch.zeros_like(q_rows))


def test_padded_is_whole_tiles() -> None:
    assert [padded(n) for n in (0, 1, TILE, TILE + 1)] == [TILE, TILE, TILE, 2 * TILE]
