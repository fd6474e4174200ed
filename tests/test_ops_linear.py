"""engines.core.ops.linear: the compiled paged step's matmul, which must be the eager forward's
(Linear's) product, packed or not, inside a torch.compile graph as well as outside."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

from engines.core.ops import Linear, linear

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
