"""The int4 reference (engines.adapters.ortgenai.reference): MatMulNBits weights unpacked as
the contrib operator's spec lays them out, the reference built over the int4 model's own
weights, and it standing much closer to the ortgenai_int4 engine than the fp32 reference does.

Skipped where onnxruntime_genai is not importable (run with .venv-ortgenai/bin/python -m
pytest). The int4 build takes about 40 s the first time (cached after that).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime_genai lives in .venv-ortgenai "
                    "(bash ci/ortgenai-env.sh)")

import onnxruntime_genai as og  # noqa: E402
import torch  # noqa: E402

from engines.adapters.ortgenai.convert import ortgenai_dir  # noqa: E402
from engines.adapters.ortgenai.reference import (  # noqa: E402
    dequantize,
    dequantized_model,
    independent_int4,
    int4_weights,
    sequential_int4,
)
from engines.models import load_model  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402


def _pack(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (..., even length) two to a byte, the lower nibble first."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def test_codes_unpack_lower_nibble_first_with_the_default_zero_point() -> None:
    # N=2, K=40 with blocks of 32: the second block is padded to 32 codes, the pad dropped.
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (2, 2, 32), dtype=np.uint8)
    scales = np.array([[0.5, 2.0], [1.0, 0.25]], dtype=np.float32)
    w = dequantize(_pack(codes), scales, None, n=2, k=40, bits=4, block_size=32)
    expected = ((codes.astype(np.float32) - 8) * scales[..., None]).reshape(2, 64)[:, :40]
    assert w.shape == (2, 40)
    np.testing.assert_array_equal(w, expected)
    # Swapping the nibbles' order would put code 1 at position 0: not what comes out.
    assert w[0, 0] == (codes[0, 0, 0] - 8.0) * 0.5


def test_packed_zero_points_are_read_per_block() -> None:
    codes = np.full((1, 2, 32), 9, dtype=np.uint8)
    zero = np.array([[3 | (5 << 4)]], dtype=np.uint8)  # block 0: 3, block 1: 5
    w = dequantize(_pack(codes), np.ones((1, 2), np.float32), zero, n=1, k=64, bits=4,
                   block_size=32)
    assert set(w[0, :32]) == {6.0} and set(w[0, 32:]) == {4.0}


def test_other_bit_widths_and_layouts_are_refused_by_name() -> None:
    b = np.zeros((1, 1, 16), np.uint8)
    with pytest.raises(ValueError, match="bits: 8"):
        dequantize(b, np.ones((1, 1), np.float32), None, n=1, k=32, bits=8, block_size=32)
    with pytest.raises(ValueError, match="B: shape"):
        dequantize(b, np.ones((1, 1), np.float32), None, n=2, k=32, bits=4, block_size=32)


def test_every_linear_weight_comes_from_the_int4_model() -> None:
    fp32 = load_model("tiny", seed=0)
    weights = int4_weights(ortgenai_dir("tiny", 0, "int4") / "model.onnx", fp32.config)
    linears = {f"{n}.weight" for n, m in fp32.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(weights) == linears
    model = dequantized_model()
    state = model.state_dict()
    for name, w in weights.items():
        assert torch.equal(state[name], w), name
        # int4: at most 16 distinct values per block of 32, never the float32 weight itself.
        assert not torch.equal(w, fp32.state_dict()[name]), name
    # The float32 model the engines share is left as it was.
    assert load_model("tiny", seed=0) is fp32 and not torch.equal(
        fp32.lm_head.weight, model.lm_head.weight)


def test_the_reference_declares_the_engines_precision() -> None:
    caps = capabilities_of(sequential_int4())
    assert (caps.dtype, caps.kv_dtype) == ("int4", "float32")


def test_its_independent_twin_runs_the_same_weights_and_is_named() -> None:
    twin = sequential_int4().independent_twin()
    assert twin is independent_int4  # a repro script imports it by name
    assert getattr(twin(), "model", None) is dequantized_model()


# Prompts of 3 to 70 tokens, the lengths the tolerances were measured over.
PROMPTS = [[5, 6, 7], [11, 300, 42, 9, 870, 1, 64, 500], list(range(100, 170))]


def _engine_logprobs(prompt: list[int]) -> torch.Tensor:
    """onnxruntime-genai's int4 model (the ortgenai_int4 variant's) at every prompt position."""
    model = og.Model(og.Config(str(ortgenai_dir("tiny", 0, "int4"))))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 1, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([prompt], dtype=np.int32))
    return torch.log_softmax(torch.from_numpy(gen.get_output("logits")[0].astype(np.float32)), -1)


def test_the_dequantized_reference_stands_much_closer_to_the_engine() -> None:
    """Measured on 18 prompts of 3-120 tokens (docs/engines.md note c): the fp32 reference's
    logprobs part from the engine's by up to 4.9, the dequantized one's by up to 0.55; the
    engine's greedy token trails the dequantized reference's best by at most 0.104 (the
    engine's int8 activations), the fp32 reference's by up to 3.8."""
    refs = {"fp32": load_model("tiny", seed=0), "int4": dequantized_model()}
    gap = dict.fromkeys(refs, 0.0)
    margin = dict.fromkeys(refs, 0.0)
    with torch.no_grad():
        for prompt in PROMPTS:
            engine = _engine_logprobs(prompt)
            choice = engine.argmax(-1, keepdim=True)
            for key, model in refs.items():
                ref = torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), -1)
                gap[key] = max(gap[key], (ref - engine).abs().max().item())
                trail = ref.max(-1).values - ref.gather(-1, choice)[:, 0]
                margin[key] = max(margin[key], trail.max().item())
    assert gap["int4"] * 4 < gap["fp32"], gap
    assert margin["int4"] * 4 < margin["fp32"], margin
    # The tolerance the reference is compared with (int8's, 0.25) covers what is left.
    assert margin["int4"] < 0.25, margin
