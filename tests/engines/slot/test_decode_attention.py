"""engines.slot.forward.decode_attention: the grouped-query fold CUDA uses is the same attention as
the enable_gqa call the CPU keeps (checked here on the CPU, where both run)."""

from __future__ import annotations

import pytest
import torch

from engines.slot.forward import decode_attention


@pytest.mark.parametrize(("heads", "kv_heads"), [(12, 2), (2, 1), (4, 4)])
def test_folding_query_groups_matches_enable_gqa(heads: int, kv_heads: int) -> None:
    gen = torch.Generator().manual_seed(0)
    n, width, dim, max_len = 5, 37, 16, 64
    q = torch.randn(n, heads, 1, dim, generator=gen)
    cache = torch.randn(2, n + 2, kv_heads, max_len, dim, generator=gen)
    keys, values = cache[0, :n, :, :width], cache[1, :n, :, :width]  # strided, as the cache
    lengths = torch.tensor([0, 5, 36, 17, 2])
    mask = (torch.arange(width)[None, :] <= lengths[:, None])[:, None, None, :]
    plain = decode_attention(q, keys, values, mask, dim**-0.5, fold_groups=False)
    folded = decode_attention(q, keys, values, mask, dim**-0.5, fold_groups=True)
    assert folded.shape == plain.shape == (n, heads, 1, dim)
    torch.testing.assert_close(folded, plain, rtol=1e-5, atol=1e-6)
    # Row 0 sees only its first key: its output is that key's value, for every head.
    group = heads // kv_heads
    expected = values[0, :, 0].repeat_interleave(group, dim=0)
    torch.testing.assert_close(folded[0, :, 0], expected, rtol=1e-5, atol=1e-6)


def test_cpu_keeps_the_enable_gqa_call() -> None:
    # The default on a CPU tensor is the unfolded call: bit-identical to before the fold.
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, 1, 8, generator=gen)
    keys, values = torch.randn(3, 2, 9, 8, generator=gen), torch.randn(3, 2, 9, 8, generator=gen)
    mask = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, scale=0.3, enable_gqa=True)
    assert torch.equal(decode_attention(q, keys, values, mask, 0.3), expected)
