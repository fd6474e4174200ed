"""engines.paged.compiled's two attentions, run eagerly on one pool: _row_attention (a row's
tokens together, for prompt chunks and drafts) must give each real token what _attention (each
token over its own table row) gives it, whatever the padding of short rows and the blocks'
order in the pool. The compiled graph's tokens are checked against the eager forward in
tests/engines/paged/test_variants.py; this pins the arithmetic where a wrong index would show as a
small difference only on some rows."""

from __future__ import annotations

import torch

from engines.paged.compiled import _attention, _row_attention


def _pool(blocks: int, kv_heads: int, dim: int, block_size: int,
          gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    keys = torch.randn(blocks, kv_heads, dim, block_size, generator=gen)  # transposed layout
    values = torch.randn(blocks, block_size, kv_heads, dim, generator=gen)
    return keys, values


def test_row_attention_matches_per_token_attention_for_ragged_rows() -> None:
    gen = torch.Generator().manual_seed(0)
    heads, kv_heads, dim, bs = 4, 2, 8, 4
    keys, values = _pool(40, kv_heads, dim, bs, gen)
    # (tokens in the step, cached before them): a first chunk, a later chunk over a cached
    # prefix, two drafts' rows; lengths differ, so all but the longest are padded.
    spans = [(7, 0), (5, 9), (2, 13), (3, 1)]
    width = max(start + n for n, start in spans)
    nb = -(-width // bs)
    order = torch.randperm(40, generator=gen)
    tables = torch.stack([order[i * nb : (i + 1) * nb] for i in range(len(spans))])
    length = max(n for n, _ in spans)
    positions: list[int] = []
    back: list[int] = []
    rows: list[list[int]] = []
    owners: list[int] = []
    for r, (n, start) in enumerate(spans):
        at = len(positions)
        positions.extend(range(start, start + n))
        rows.append(list(range(at, at + n)) + [at] * (length - n))
        back.extend(range(r * length, r * length + n))
        owners.extend([r] * n)
    q = torch.randn(len(positions), heads, dim, generator=gen)
    pos = torch.tensor(positions)
    want = _attention(q, pos, tables[torch.tensor(owners)], keys, values, 0.3)
    got = _row_attention(q, pos, torch.tensor(rows), tables, keys, values, 0.3)
    assert got.shape == (len(spans) * length, heads, dim)
    torch.testing.assert_close(got.index_select(0, torch.tensor(back)), want)


def test_row_attention_reads_only_up_to_each_tokens_position() -> None:
    """A key past a token's position (a later token of its chunk, or a stale entry in the
    row's last block) must not reach it: changing those keys changes nothing before them."""
    gen = torch.Generator().manual_seed(1)
    keys, values = _pool(8, 1, 4, 4, gen)
    table = torch.tensor([[3, 5, 1]])
    rows = torch.tensor([[0, 1, 2, 3, 4]])
    pos = torch.arange(4, 9)  # a chunk at positions 4..8 over 4 cached tokens
    q = torch.randn(5, 2, 4, generator=gen)
    before = _row_attention(q, pos, rows, table, keys, values, 0.5)
    keys[1] += 10.0  # block 1 holds positions 8..11: only the last token sees position 8
    values[1] -= 3.0
    after = _row_attention(q, pos, rows, table, keys, values, 0.5)
    torch.testing.assert_close(after[:4], before[:4])
    assert not torch.allclose(after[4], before[4])
