"""scripts/closed_ceiling.py's FLOP count, against the built model's own weights and a count
of every query-key pair: the ceiling it reports is only as true as this count."""

from __future__ import annotations

import pytest

from engines.bench import draws
from engines.models import PRESETS, build_preset
from scripts.closed_ceiling import mix_flops


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
    proj, head, attention, out = mix_flops(preset)
    assert out == outputs
    assert proj == 2 * per_token * tokens
    assert head == 2 * model.get_output_embeddings().weight.numel() * outputs
    assert attention == (4 * config.num_attention_heads * head_dim * pairs
                         * config.num_hidden_layers)
