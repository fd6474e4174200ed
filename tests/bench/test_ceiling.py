"""engines.bench.ceiling: the closed batch's FLOP count, by hand on a tiny shape and against
the built presets' own weights, and what the count refuses; the ceiling's arithmetic. The
ceiling is only as true as this count. No rate is asserted (timings move with the host)."""

from __future__ import annotations

import math

import pytest

from engines.bench import draws
from engines.bench.ceiling import (
    Ceiling,
    MixFlops,
    best_product,
    best_rate,
    mix_flops,
    projections,
    uncounted,
)
from engines.models import PRESETS, build_preset

# hidden 4, 2 query heads of 2 over 1 KV head, intermediate 6, one layer, vocab 10
TINY = {"vocab_size": 10, "hidden_size": 4, "intermediate_size": 6, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1}


def _item(prompt_len: int, max_tokens: int) -> draws.WorkItem:
    return draws.WorkItem(tuple(range(prompt_len)), max_tokens)


def test_mix_flops_by_hand() -> None:
    # One layer's products: QKV 4 x (2 + 2) * 2 = 32, O 4 x 4 = 16, gate-up 4 x 12 = 48,
    # down 6 x 4 = 24: 120 multiply-adds, 240 FLOPs a token.
    assert projections(TINY) == [(4, 8), (4, 4), (4, 12), (6, 4)]
    # A 3-token prompt with 2 outputs: 4 positions pass the stack (the last output never
    # does), attending to 1 + 2 + 3 + 4 = 10 keys; a 1-token prompt with 1 output: 1 and 1.
    found = mix_flops(TINY, [_item(3, 2), _item(1, 1)])
    assert found == MixFlops(projections=240.0 * 5, lm_head=2.0 * 4 * 10 * 3,
                             attention=4.0 * 2 * 2 * 11, output_tokens=3)
    assert found.total == 1200 + 240 + 176


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_mix_flops_match_the_model(preset: str) -> None:
    model = build_preset(preset)
    config = model.config
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    per_token = sum(module.weight.numel() for name, module in model.named_modules()
                    if name.rsplit(".", 1)[-1] in names)
    items = draws.closed_mix(vocab_size=PRESETS[preset].config["vocab_size"])
    tokens = sum(item.prompt_len + item.max_tokens - 1 for item in items)
    outputs = sum(item.max_tokens for item in items)
    pairs = sum(p + 1 for item in items for p in range(item.prompt_len + item.max_tokens - 1))
    head_dim = config.hidden_size // config.num_attention_heads
    found = mix_flops(PRESETS[preset].config, items)
    assert found.output_tokens == outputs
    assert found.projections == 2 * per_token * tokens
    assert found.lm_head == 2 * model.get_output_embeddings().weight.numel() * outputs
    assert found.attention == (4 * config.num_attention_heads * head_dim * pairs
                               * config.num_hidden_layers)


@pytest.mark.parametrize(("preset", "says"), [
    ("tiny-moe", "a mixture of 4 experts"),
    ("tiny-mistral-swa", "a sliding attention window of 16"),
    ("tiny-gemma-mixed", "a sliding attention window of 16"),
])
def test_other_arithmetic_is_refused_by_name(preset: str, says: str) -> None:
    config = PRESETS[preset].config
    assert says in (uncounted(config) or "")
    with pytest.raises(ValueError, match=says):
        mix_flops(config, [_item(3, 2)])


def test_full_attention_layers_and_an_unused_window_are_counted() -> None:
    assert uncounted({**TINY, "layer_types": ["full_attention"]}) is None
    assert uncounted({**TINY, "sliding_window": 4096, "use_sliding_window": False}) is None
    assert "sliding_attention" in (uncounted({**TINY, "layer_types": ["sliding_attention"]})
                                   or "")


def test_ceiling_is_the_arithmetic_at_the_mean_rate() -> None:
    flops = MixFlops(projections=6e9, lm_head=2e9, attention=2e9, output_tokens=500)
    ceiling = Ceiling("float32", flops, (90.0, 110.0), "F.linear, 8 x 4 x 8")
    assert ceiling.gflops == 100.0
    assert math.isclose(ceiling.seconds, 0.1)
    assert math.isclose(ceiling.tokens_per_s, 5000.0)
    assert "mean of 2 samples, 90.0-110.0" in ceiling.line()
    assert "5,000 output tok/s" in ceiling.line()
    with pytest.raises(ValueError, match="rates"):
        Ceiling("float32", flops, (), "")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_fastest_product_is_one_of_the_model_shapes(dtype: str) -> None:
    product, found = best_product(TINY, dtype, rows=8, calls=1)
    assert found.gflops > 0 and found.which == product.which
    shapes = [f"8 x {i} x {o}" for i, o in [*projections(TINY), (4, 10)]]
    assert any(found.which.endswith(shape) for shape in shapes), found.which
    assert product.call().dtype == getattr(__import__("torch"), dtype)
    assert product.sustained(0.0) > 0  # at least one call, however short the span


def test_best_rate_refuses_a_dtype_it_does_not_time() -> None:
    with pytest.raises(ValueError, match="dtype: 'float16'"):
        best_rate(TINY, "float16", rows=8, calls=1)
