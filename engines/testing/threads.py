"""--torch-threads: torch's intra-op threads in the suite's process, where the run asks.

The suite calls an engine one step at a time, and on a CPU the small models it is usually run
with gain nothing from intra-op threads: on a busy machine they only contend (measured on 2
loaded cores: the batching-ci run of the paged engine took 221 s with torch's default of 2
threads, 33 s with 1). The setting is process-wide, so the suite changes it only when asked.
"""

from __future__ import annotations

import importlib

__all__ = ["limit_torch_threads"]


def limit_torch_threads(threads: int | None) -> None:
    """torch.set_num_threads(threads); None leaves torch as it is."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"torch_threads must be at least 1, got {threads}")
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        raise ValueError(f"torch_threads {threads} was given, but torch is not "
                         "installed") from None
    torch.set_num_threads(threads)
