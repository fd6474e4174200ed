"""Zero-argument factories for the paired OpenVINO GenAI comparison of issue 37 (equal seats,
KV memory and cores): ours, paged `equal_memory` (16 seats, 8 whole contexts of KV) against
OpenVINO GenAI with 16 sequences over 8 x 16 blocks of 32 tokens (the same KV), per preset;
`_pc` / `_nopc`: prefix caching on / off in both. Until 2026-12-05 the bench's runs replayed
one trace's prompts as drawn, so with prefix caching on, every run found the run before it in
the cache: the issue's table ran ours with it (our default) and OpenVINO GenAI without (its
adapter's). Every run now sends prompts of its own (engines.bench.fresh).

    taskset -c 0 .venv-openvino/bin/python -m engines.bench closed --no-hf --preset tiny \\
        --engine paged=scripts.pair_factories:paged_tiny_nopc \\
        --engine openvino=scripts.pair_factories:openvino_tiny_nopc
"""

from __future__ import annotations

from typing import Any

from engines.models import preset_max_model_len
from engines.paged.variants import equal_memory

SEATS = 16
CONTEXTS = 8  # whole contexts of KV memory both engines get
OV_BLOCK = 32  # the OpenVINO CPU plugin's block size


def _openvino(preset: str, caching: bool, budget: int = 256) -> Any:
    from engines.adapters.openvino.adapter import openvino_genai_engine

    context = preset_max_model_len(preset) or 512
    return openvino_genai_engine(preset, max_batch_size=SEATS,
                                 num_kv_blocks=CONTEXTS * -(-context // OV_BLOCK),
                                 enable_prefix_caching=caching, max_num_batched_tokens=budget)


def _paged(preset: str, caching: bool, **kwargs: Any) -> Any:
    return equal_memory(max_batch_size=CONTEXTS, model=preset, enable_prefix_caching=caching,
                        **kwargs)


def paged_tiny() -> Any:  # the table: ours with its default prefix caching
    return _paged("tiny", True)


def paged_small() -> Any:
    return _paged("small", True)


def openvino_tiny() -> Any:  # the table: the adapter's default, no prefix caching
    return _openvino("tiny", False)


def openvino_small() -> Any:
    return _openvino("small", False)


def paged_tiny_nopc() -> Any:
    return _paged("tiny", False)


def paged_small_nopc() -> Any:
    return _paged("small", False)


openvino_tiny_nopc = openvino_tiny
openvino_small_nopc = openvino_small


def paged_tiny_pc() -> Any:
    return _paged("tiny", True)


def paged_small_pc() -> Any:
    return _paged("small", True)


def openvino_tiny_pc() -> Any:
    return _openvino("tiny", True)


def openvino_small_pc() -> Any:
    return _openvino("small", True)


# Ours with the compiled step (engines.paged.compiled): compiles in the bench's warm-up runs.
def paged_tiny_compiled() -> Any:
    return _paged("tiny", True, compiled="step")


def paged_small_compiled() -> Any:
    return _paged("small", True, compiled="step")


def paged_tiny_nopc_compiled() -> Any:
    return _paged("tiny", False, compiled="step")


def paged_small_nopc_compiled() -> Any:
    return _paged("small", False, compiled="step")


# Ours compiled at OpenVINO GenAI's token budget (its adapter's max_num_batched_tokens, 256):
# the same per-step budget as well as the same seats, KV and cores.
def paged_tiny_compiled_b256() -> Any:
    return _paged("tiny", True, compiled="step", max_num_batched_tokens=256)


def paged_small_b256() -> Any:
    return _paged("small", True, max_num_batched_tokens=256)


# The closed runs at OpenVINO GenAI's token budget, prefix caching off in both (see above).
def paged_tiny_nopc_compiled_b256() -> Any:
    return _paged("tiny", False, compiled="step", max_num_batched_tokens=256)


def paged_small_nopc_compiled_b256() -> Any:
    return _paged("small", False, compiled="step", max_num_batched_tokens=256)


def paged_tiny_nopc_b256() -> Any:  # eager, at OpenVINO GenAI's token budget
    return _paged("tiny", False, max_num_batched_tokens=256)


def paged_tiny_compiled_b512() -> Any:  # a whole 482-token prompt in one step
    return _paged("tiny", True, compiled="step", max_num_batched_tokens=512)


def openvino_tiny_pc_b512() -> Any:  # OpenVINO GenAI at the same token budget as the above
    return _openvino("tiny", True, budget=512)
