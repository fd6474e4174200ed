"""What every library adapter owes the protocol, one test per behaviour, parametrized by library:
greedy tokens equal transformers' generate with requests arriving mid-run, a stop id ends its
request with the token kept (beside a request without one), the model's own EOS never ends a
request, an abort ends a request once and frees its id, and bad input is refused before the
library with nothing in flight lost.

Each library lives in its own venv (ci/LIB-env.sh); a library not importable here is skipped,
by name. What a library does beyond the contract is in its own tests/test_LIB_adapter.py.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from engines.protocol import Engine, FinishReason, InvalidRequest, Request, SamplingParams
from tests.helpers import (
    assert_abort_frees_the_id,
    assert_generate_tokens_with_mid_run_arrivals,
    drain,
    hf_generate,
    make_prompts,
)


@dataclass(frozen=True)
class Library:
    name: str  # its adapter folder under engines.adapters
    module: str  # what must import for its adapter to run
    eos: int  # the converted model's EOS, which the library would stop on by itself
    # A prompt whose greedy continuation on the tiny preset generates `eos` (found by search
    # over make_prompts([8], seed=...)).
    eos_prompt: tuple[int, ...]
    # Sampling the adapter refuses, besides what every adapter refuses (the library's gaps).
    refused: tuple[SamplingParams, ...] = ()


LIBRARIES = (
    Library("ct2", "ctranslate2", 0, (871, 652, 523, 276, 315, 42, 77, 17),
            (SamplingParams(temperature=1.0, seed=3), SamplingParams(repetition_penalty=1.3))),
    Library("openvino", "openvino_genai", 0, (871, 652, 523, 276, 315, 42, 77, 17)),
    Library("ortgenai", "onnxruntime_genai", 1023, (877, 178, 716, 856, 308, 158, 693, 666),
            (SamplingParams(temperature=1.0, seed=3),)),
)


@pytest.fixture(scope="module", params=LIBRARIES, ids=[lib.name for lib in LIBRARIES])
def library(request: pytest.FixtureRequest) -> Library:
    lib: Library = request.param
    if importlib.util.find_spec(lib.module) is None:
        pytest.skip(f"{lib.module} is not installed here: its venv is built by "
                    f"ci/{lib.name}-env.sh")
    return lib


@pytest.fixture(scope="module")
def engine(library: Library) -> Iterator[Engine]:
    eng: Engine = importlib.import_module(f"engines.adapters.{library.name}").make_engine()
    yield eng
    assert not eng.has_work()


def test_tokens_match_generate_with_mid_run_arrivals(engine: Engine) -> None:
    assert_generate_tokens_with_mid_run_arrivals(engine, [3, 70, 1, 200])


def test_a_stop_id_ends_its_request_with_the_token_kept(engine: Engine, library: Library) -> None:
    (prompt,) = make_prompts([8], seed=1)
    free = hf_generate(prompt, 6)
    stop = free[3]
    absent = next(t for t in (5, 1022) if t not in free and t != library.eos)
    expected = free[: free.index(stop) + 1]
    # The first stop id never comes, so the second must stop; a request without stop ids in
    # the same batch runs its whole budget.
    stopped = Request(prompt, SamplingParams(max_tokens=6, stop_token_ids=(absent, stop)))
    free_run = Request(prompt, SamplingParams(max_tokens=6))
    got = drain(engine, [stopped, free_run])
    assert got[stopped.request_id] == (expected, FinishReason.STOP)
    assert got[free_run.request_id] == (free, FinishReason.LENGTH)


def test_the_models_eos_does_not_stop_a_request(engine: Engine, library: Library) -> None:
    expected = hf_generate(library.eos_prompt, 30)
    assert library.eos in expected  # else this test proves nothing
    request = Request(library.eos_prompt, SamplingParams(max_tokens=30))
    assert drain(engine, [request])[request.request_id] == (expected, FinishReason.LENGTH)


def test_abort_emits_one_empty_abort_and_frees_the_id(engine: Engine) -> None:
    assert_abort_frees_the_id(engine)


def test_bad_input_is_refused_before_the_library(engine: Engine, library: Library) -> None:
    (prompt,) = make_prompts([6], seed=3)
    keep = Request(prompt, SamplingParams(max_tokens=5))
    engine.add_request(keep)
    bad = [Request((), SamplingParams()), Request((1024,), SamplingParams()),
           Request(prompt, SamplingParams(max_tokens=0)),
           Request(prompt, SamplingParams(max_tokens=510)),
           Request(prompt, SamplingParams(), request_id=keep.request_id)]
    bad += [Request(prompt, params) for params in library.refused]
    for request in bad:
        with pytest.raises(InvalidRequest):
            engine.add_request(request)
    assert drain(engine, [])[keep.request_id] == (hf_generate(prompt, 5), FinishReason.LENGTH)
