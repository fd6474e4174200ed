"""The native causal-attention kernel (causal_attention.cpp): built once per host with its C++
compiler, cached, and called through ctypes on the tensors' memory.

Why a compiler at run time rather than a wheel: the kernel is a few hundred lines tuned by
`-march=native` for the CPU that runs it, it needs no torch headers (a build takes about a
second, not the minute a torch extension does), and a host without a compiler loses only
speed: `available()` says so and every caller falls back to ATen's SDPA, and the engine's
banner line (its `execution`, in the bench's reports) names which attention ran
(`describe()`).

ctypes releases the GIL for the call, so with several torch threads the query rows are split
over a small thread pool of the same size (rows weighted by their causal length).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import torch

SOURCE = Path(__file__).with_name("causal_attention.cpp")
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fno-math-errno")
# Rows a thread must have before the call is split: below this a split costs more than it saves.
MIN_ROWS_PER_THREAD = 64
_I64, _PTR, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
# BATCHING_ENGINES_NATIVE=0 turns the kernel off (ATen's SDPA everywhere), e.g. to compare.
ENV_SWITCH = "BATCHING_ENGINES_NATIVE"


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "batching-engines" / "native"


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def _build(compiler: str) -> Path:
    """The shared library for this source, compiler and host, built if not cached. Writes to
    a temporary name and renames, so concurrent builds (pytest-xdist workers) never load a
    half-written file."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             check=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), compiler, version, *FLAGS,
                                    platform.machine(), platform.node()]).encode())
    target = _cache_dir() / f"causal_attention-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True,
                       text=True, check=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@cache
def _library() -> ctypes.CDLL | str:
    """The loaded library, or why there is none."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"{ENV_SWITCH}=0"
    compiler = _compiler()
    if compiler is None:
        return "no C++ compiler (g++ or $CXX) on this host"
    try:
        lib = ctypes.CDLL(str(_build(compiler)))
    except (OSError, subprocess.CalledProcessError) as exc:
        lines = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()
        return f"building {SOURCE.name} failed: {lines[-1] if lines else type(exc).__name__}"
    argtypes: list[Any] = ([_PTR, _I64, _I64] + [_PTR] * 6 + [_PTR, _I64, _I64]
                           + [_INT] * 5 + [ctypes.c_float, _INT, _INT])
    lib.causal_attention.argtypes = argtypes
    rows_argtypes: list[Any] = ([_PTR, _I64, _I64, _INT, _PTR, _I64, _INT, _PTR, _PTR, _I64]
                                + [_PTR] * 4 + [_PTR, _I64, _I64] + [_INT] * 3
                                + [ctypes.c_float, _INT, _INT])
    lib.rows_attention.argtypes = rows_argtypes
    decode_argtypes: list[Any] = ([_PTR, _I64, _I64, _INT, _PTR, _PTR, _I64] + [_PTR] * 4
                                  + [_PTR, _I64, _I64] + [_INT] * 3
                                  + [ctypes.c_float, _INT, _INT])
    lib.decode_attention.argtypes = decode_argtypes
    for fn in (lib.causal_attention, lib.rows_attention, lib.decode_attention):
        fn.restype = ctypes.c_int
    return lib


def available() -> bool:
    return not isinstance(_library(), str)


def refusal(dtype: torch.dtype, device: torch.device, head_dim: int) -> str | None:
    """Why prompt chunks of this kind attend with ATen's SDPA instead, or None: the kernel
    computes fp32 on a CPU, head_dim a multiple of 32, once built."""
    lib = _library()
    if isinstance(lib, str):
        return lib
    if device.type != "cpu":
        return f"on {device.type}: the kernel is for CPUs"
    if dtype != torch.float32:
        return f"{dtype}: the kernel computes float32"
    if head_dim % 32:
        return f"head_dim {head_dim} is not a multiple of 32"
    return None


def describe(dtype: torch.dtype, device: torch.device, head_dim: int) -> str:
    """Which attention prompt chunks of this kind use, and why: for reports."""
    reason = refusal(dtype, device, head_dim)
    return ("the native causal kernel (engines/core/causal_attention.cpp)" if reason is None
            else f"ATen SDPA ({reason})")


@cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="causal-attention")


class KV(NamedTuple):
    """Keys or values as the kernel reads them: `tensor` dense [keys, kv_heads, D] (table
    None), or a block pool read through `table` (int64 block ids, contiguous); `strides` in
    elements: (block_size, block, token, head, dim)."""

    tensor: torch.Tensor
    table: torch.Tensor | None
    strides: tuple[int, int, int, int, int]
    heads: int


def dense(x: torch.Tensor) -> KV:
    """[keys, kv_heads, D], any strides."""
    return KV(x, None, (1, 0, x.stride(0), x.stride(1), x.stride(2)), x.shape[1])


def layout_of(shape: tuple[int, ...], stride: tuple[int, ...], *, transposed: bool = False
              ) -> tuple[tuple[int, int, int, int, int], int]:
    """(strides, kv_heads) of a layer's pool of this shape and stride: [blocks, block_size,
    kv_heads, D] or, `transposed`, [blocks, kv_heads, D, block_size] (the compiled step's
    keys)."""
    if transposed:
        return (shape[3], stride[0], stride[3], stride[1], stride[2]), shape[1]
    return (shape[1], stride[0], stride[1], stride[2], stride[3]), shape[2]


def pool(x: torch.Tensor, table: torch.Tensor, *, transposed: bool = False) -> KV:
    """A layer's pool (see layout_of) read through `table`."""
    return KV(x, table, *layout_of(tuple(x.shape), x.stride(), transposed=transposed))


@cache
def strides(values: tuple[int, ...]) -> Any:
    """A ctypes int64 array of `values` (the kernel only reads it): made once per layout."""
    return (ctypes.c_int64 * len(values))(*values)


def _kv_args(kv: KV) -> tuple[int, int | None, Any]:
    if kv.table is not None and (kv.table.dtype != torch.long or kv.table.stride(-1) != 1):
        raise ValueError("causal_attention: a block table must be contiguous int64")
    return (kv.tensor.data_ptr(), None if kv.table is None else kv.table.data_ptr(),
            strides(kv.strides))


def causal_attention(q: torch.Tensor, k: KV, v: KV, start: int, scale: float,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """q [n, heads, D]: a chunk's tokens at positions start..start+n-1, each attending to keys
    0..its position; k and v hold at least start + n keys. Writes `out` (or a new tensor)
    [n, heads, D] and returns it. Call only where refusal(q.dtype, q.device, D) is None."""
    lib = library()
    n, heads, dim = q.shape
    if heads % k.heads:
        raise ValueError(f"causal_attention: {heads} heads over {k.heads} KV heads")
    if q.stride(2) != 1:
        q = q.contiguous()
    if out is None:
        out = torch.empty(n, heads, dim, dtype=q.dtype, device=q.device)
    args = (q.data_ptr(), q.stride(0), q.stride(1), *_kv_args(k), *_kv_args(v),
            out.data_ptr(), out.stride(0), out.stride(1), n, start, heads, k.heads, dim, scale)
    run(lib.causal_attention, args, n * heads)
    return out


def library() -> ctypes.CDLL:
    """The loaded kernel library; only where available()."""
    lib = _library()
    assert not isinstance(lib, str), lib
    return lib


def run(fn: Callable[..., int], args: tuple[Any, ...], rows: int) -> None:
    """fn(*args, part, parts) on `parts` threads (ctypes releases the GIL), as many as
    torch's where each gets MIN_ROWS_PER_THREAD query rows."""
    threads = torch.get_num_threads()
    parts = 1 if threads == 1 else min(threads, max(1, rows // MIN_ROWS_PER_THREAD))
    if parts == 1:
        codes = [fn(*args, 0, 1)]
    else:
        workers = _pool(parts)
        jobs = [workers.submit(fn, *args, p, parts) for p in range(parts)]
        codes = [job.result() for job in jobs]
    if -2 in codes:
        raise ValueError("decode_attention: keys must be stored transposed per block, blocks "
                         "a multiple of 16 tokens, 1, 2, 4 or 8 query heads a KV head")
    if any(codes):
        raise MemoryError("causal_attention: no scratch memory for the keys")
