"""The onnxruntime-genai adapter declares the precision its builder made the model at, and
that declaration matches the built model.onnx: its KV-cache inputs' element type, and int4
matrix weights (MatMulNBits, 4 bits) where it says int4.

Skipped where onnxruntime_genai is not importable (run with .venv-ortgenai/bin/python -m
pytest). The fp16 and int4 builds take about 40 s each the first time (cached after that).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnxruntime_genai", reason="onnxruntime_genai lives in .venv-ortgenai "
                    "(bash ci/ortgenai-env.sh)")

import onnx  # noqa: E402

from engines.adapters.ortgenai import make_engine  # noqa: E402
from engines.adapters.ortgenai.adapter import OrtGenaiEngine  # noqa: E402
from engines.adapters.ortgenai.convert import ortgenai_dir  # noqa: E402
from engines.adapters.ortgenai.variants import ortgenai_fp16, ortgenai_int4  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402

_ONNX = {"FLOAT": "float32", "FLOAT16": "float16", "BFLOAT16": "bfloat16"}


def _built(model_dir: Path) -> tuple[str, str]:
    """(weights, KV cache) of a built model, read from its graph."""
    graph = onnx.load(str(model_dir / "model.onnx"), load_external_data=False).graph
    kv = next(i for i in graph.input if i.name.startswith("past_key_values"))
    kv_dtype = _ONNX[onnx.TensorProto.DataType.Name(kv.type.tensor_type.elem_type)]
    bits = {a.i for n in graph.node if n.op_type == "MatMulNBits" for a in n.attribute
            if a.name == "bits"}
    return ("int4" if bits == {4} else kv_dtype), kv_dtype


@pytest.mark.parametrize(("factory", "precision"), [
    (make_engine, "fp32"), (ortgenai_fp16, "fp16"), (ortgenai_int4, "int4")])
def test_each_variant_declares_the_precision_of_the_model_it_runs(
        factory: object, precision: str) -> None:
    engine = factory()  # type: ignore[operator]
    assert isinstance(engine, OrtGenaiEngine)
    caps = capabilities_of(engine)
    assert (caps.dtype, caps.kv_dtype) == _built(ortgenai_dir("tiny", 0, precision))


def test_the_precisions_build_apart() -> None:
    dirs = {ortgenai_dir("tiny", 0, p) for p in ("fp32", "fp16", "int4")}
    assert len(dirs) == 3


def test_an_unknown_precision_is_refused_by_name() -> None:
    from engines.adapters.ortgenai.adapter import ortgenai_engine

    with pytest.raises(ValueError, match="precision: 'int8'"):
        ortgenai_engine(precision="int8")
