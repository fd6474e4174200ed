"""The mistral.rs adapter declares its KV cache's dtype: F32 by default (MISTRALRS_CPU_KV_F32),
the library's CPU default f16 for mistralrs_kv_f16, and the f16 one really is coarser (its
logprobs leave the fp32 reference's). The library fixes the cache's dtype for the whole
process at its first Runner, so an engine asking for the other one afterwards is refused, and
the f16 engine is built in a subprocess of its own here.

Skipped where mistralrs is not importable (run with .venv-mistralrs/bin/python -m pytest).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mistralrs", reason="mistralrs lives in .venv-mistralrs "
                    "(bash ci/mistralrs-env.sh)")

from engines.adapters.mistralrs import make_engine  # noqa: E402
from engines.adapters.mistralrs.variants import mistralrs_kv_f16  # noqa: E402
from engines.protocol import capabilities_of  # noqa: E402

_ROOT = Path(__file__).resolve().parents[3]

# Greedy logprobs of the f16-cache engine against the fp32 reference, on the positions where
# their tokens still agree; prints the declared KV dtype and the largest difference.
_F16_RUN = """
from engines.adapters.mistralrs.variants import mistralrs_kv_f16
from engines.protocol import Request, SamplingParams, capabilities_of
from engines.sequential import SequentialEngine

def run(engine):
    request = Request(tuple(range(3, 123, 3)), SamplingParams(max_tokens=16, logprobs=1))
    engine.add_request(request)
    tokens, logprobs = [], []
    while engine.has_work():
        for out in engine.step():
            tokens += out.token_ids
            logprobs += out.logprobs or ()
    return tokens, logprobs

engine = mistralrs_kv_f16()
mine, ref = run(engine), run(SequentialEngine())
same = next((i for i, (a, b) in enumerate(zip(mine[0], ref[0])) if a != b), len(ref[0]))
print(capabilities_of(engine).kv_cache_dtype,
      max(abs(a - b) for a, b in zip(mine[1][:same], ref[1][:same])))
"""


def test_the_default_declares_an_f32_cache_and_the_process_then_refuses_f16() -> None:
    assert capabilities_of(make_engine()).kv_cache_dtype == "float32"
    with pytest.raises(ValueError, match="fixed this process's KV cache at float32"):
        mistralrs_kv_f16()


def test_the_kv_f16_variant_declares_an_f16_cache_and_has_one() -> None:
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    env.pop("MISTRALRS_CPU_KV_F32", None)
    done = subprocess.run([sys.executable, "-c", _F16_RUN], env=env, cwd=_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    declared, gap = done.stdout.split()[-2:]
    assert declared == "float16"
    # The F32 cache stays within 1e-5 of the reference (the adapter's docstring); f16's
    # rounding of the cached keys and values moves logprobs by far more.
    assert float(gap) > 1e-4
