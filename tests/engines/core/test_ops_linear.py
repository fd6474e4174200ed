"""engines.core.ops.linear: the compiled paged step's matmul, which must be the eager forward's
(Linear's) product, packed or not, inside a torch.compile graph as well as outside."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

from engines.core.ops import PACK_ELEMENTS, ROW_PACK_ELEMENTS, Linear, linear

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                  reason="oneDNN is not built into this torch")


def _weights(out: int = 48, into: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(out, into, generator=gen), torch.randn(out, generator=gen),
            torch.randn(5, into, generator=gen))


def test_unpacked_weight_is_f_linear() -> None:
    weight, bias, x = _weights()
    Linear(weight, bias, pack=False)
    assert torch.equal(linear(x, weight, bias), F.linear(x, weight, bias))


@needs_onednn
def test_packed_weight_gives_linears_product_eager_and_compiled() -> None:
    weight, bias, x = _weights()
    packed = Linear(weight, bias, pack=True)
    assert packed.packed is not None
    expected = packed(x)
    assert torch.equal(linear(x, weight, bias), expected)

    def graph(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return linear(x, w, b) * 2  # exact: a fused op of inductor's may round otherwise

    compiled = torch.compile(graph, fullgraph=True)
    with torch.inference_mode():
        got = compiled(x, weight, bias)
    assert torch.equal(got, expected * 2)


@needs_onednn
def test_a_freed_weights_packed_copy_goes_with_it() -> None:
    """The packed copies are held weakly: a new weight at a freed one's address is never
    multiplied by the old one's copy."""
    weight, bias, x = _weights()
    Linear(weight, bias, pack=True)
    del weight
    gc.collect()
    other = torch.zeros(48, 32)
    assert torch.equal(linear(x, other, bias), F.linear(x, other, bias))


@needs_onednn
def test_by_rows_a_small_weight_is_packed_only_for_calls_with_enough_rows() -> None:
    """Linear(by_rows=True) and the compiled graphs' `linear` take the same rule: a weight
    under PACK_ELEMENTS multiplies by F.linear below ROW_PACK_ELEMENTS / elements rows (the
    same bits as an unpacked Linear's) and by its packed copy from there on. (512 inputs:
    there the two products round apart, so the bits say which ran; at the tiny preset's 64
    and 128 they agree bit for bit.)"""
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(64, 512, generator=gen), torch.randn(64, generator=gen)
    assert weight.numel() < PACK_ELEMENTS
    plain = Linear(weight, bias)
    assert plain.packed is None  # without by_rows, a small weight is never packed
    by_rows = Linear(weight, bias, by_rows=True)
    assert by_rows.packed is not None and not by_rows.always_packed
    assert by_rows.min_rows == ROW_PACK_ELEMENTS // weight.numel() == 32
    few, many = (torch.randn(rows, 512, generator=gen) for rows in (31, 32))
    assert torch.equal(by_rows(few), F.linear(few, weight, bias))
    assert torch.equal(linear(few, weight, bias), F.linear(few, weight, bias))
    packed_product = torch.ops.mkldnn._linear_pointwise(many, by_rows.packed, bias, "none",
                                                        [], "")
    assert torch.equal(by_rows(many), packed_product)
    assert torch.equal(linear(many, weight, bias), packed_product)
    assert not torch.equal(packed_product, F.linear(many, weight, bias))
    torch.testing.assert_close(packed_product, F.linear(many, weight, bias), rtol=1e-4,
                               atol=1e-4)  # sums of 512 terms of ~1: rounding apart
    large = torch.randn(PACK_ELEMENTS // 512, 512, generator=gen)
    assert Linear(large, None).always_packed  # large weights: every call, as before
