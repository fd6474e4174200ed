"""Where the bench's timed code runs: the default device, and the host-device sync it needs.

On CUDA a kernel launch returns before the kernel has run, so a step timed on the host clock
would end at the last launch, and whatever the GPU still had queued (a compaction copy, the
sampled tokens' transfer) would be billed to the next step or to another engine's turn. Every
timed region therefore starts and ends with a synchronize on CUDA; on a CPU there is nothing
to wait for and no call is made.
"""

from __future__ import annotations

from collections.abc import Callable

Sync = Callable[[], None]


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def synchronizer(device: str) -> Sync | None:
    """torch.cuda.synchronize for a CUDA device; None (no call at all) for anything else."""
    if not device.startswith("cuda"):
        return None
    import torch

    index = torch.device(device).index

    def sync() -> None:
        torch.cuda.synchronize(index)

    return sync
