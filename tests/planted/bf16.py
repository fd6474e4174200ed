"""The planted bugs at reduced precision: `python -m tests.planted.bf16 [NAME ...]`.

Each planted bug whose engine takes a dtype (our continuous, paged, sequential and sampler
engines) is built in bf16 and hunted by its check as tests.planted.harness does in fp32
(seed workloads, then 60 derandomized examples, no shrinking), under tie-aware parity at
tolerance 0.125 against the sequential engine in bf16 as the reference, the one returning
processed logprobs (engines.sequential:processed_bf16, so that repetition-penalized choices
are judged: engines.testing.judging.processed); every check takes its margins from it. A toy
engine computes no floating point: its verdict is the fp32 one, and it is listed as such.
Prints one line per bug: its name, its check, what caught it (or NOT CAUGHT) and the seconds;
docs/architecture.md holds the table.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Callable
from typing import Any

from engines.protocol import Engine
from engines.testing.context import SuiteOptions, build_context
from engines.testing.profiles import register_profiles
from tests.planted.catalog import ALL_PLANTED
from tests.planted.harness import check_of, hunt, pinned

TOLERANCE = 0.125  # docs/usage.md's bf16 setting


def takes_dtype(bug: Any) -> bool:
    """Whether the bug's engine is built with a dtype (a toy engine is not)."""
    return any("dtype" in inspect.signature(vars(k)["__init__"]).parameters
               for k in inspect.getmro(bug) if "__init__" in vars(k))


def _dtype_arg(factory: Any) -> bool:
    params = inspect.signature(factory).parameters.values()
    return any(p.name == "dtype" or p.kind is p.VAR_KEYWORD for p in params)


def in_bf16(factory: Any) -> Callable[[], Engine]:
    def build() -> Engine:
        return factory(dtype="bfloat16")  # type: ignore[no-any-return]

    build.__name__ = build.__qualname__ = f"{factory.__name__}_bf16"
    build.__module__ = __name__
    return build


def hunt_bf16(bug: Any, examples: int = 60) -> str:
    """What caught the bug in bf16: the check's name, or NOT CAUGHT."""
    from engines.sequential import ProcessedSequentialEngine

    # A variant built by a function of its own (no dtype) stays as it is, in fp32.
    variants = {n: in_bf16(v) if _dtype_arg(v) else v
                for n, v in getattr(bug, "variants", {}).items()}
    options = SuiteOptions(parity="tie-aware", tolerance=TOLERANCE,
                           reference=in_bf16(ProcessedSequentialEngine), variants=variants)
    factory = in_bf16(bug)
    ctx = build_context(factory, name=factory.__name__, options=options)
    caught = hunt(bug, settings=pinned(examples, shrink=False), ctx=ctx)
    return caught.prop if caught is not None else "NOT CAUGHT"


def main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(1)
    register_profiles()
    chosen = [b for b in ALL_PLANTED if not argv or b.__name__ in argv]
    for bug in chosen:
        start = time.perf_counter()
        if not takes_dtype(bug):
            label = "(toy engine: no dtype)"
        else:
            try:
                label = hunt_bf16(bug)
            except Exception as exc:  # noqa: BLE001 - a build the bf16 variant cannot make
                label = f"ERROR {type(exc).__name__}: {str(exc)[:80]}"
        print(f"{bug.__name__:30} {check_of(bug):20} {label:22} "
              f"{time.perf_counter() - start:7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
