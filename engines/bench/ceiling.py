"""How fast a closed batch could possibly run on this core: the batch's arithmetic (the FLOPs of
every projection, the LM head and causal attention, no recompute) at the rate of the fastest
GEMM on the model's own projection and LM-head shapes, in the engine's dtype. An engine's closed
tok/s over this ceiling's is the share of the core's matrix throughput it turns into tokens; a
target above the ceiling cannot be met at that dtype on this core by any schedule, nor by any
kernel short of a faster GEMM than the best measured here.

The ceiling is generous: it charges attention and the decode steps (memory-bound) at the GEMM
rate, and norms, RoPE, sampling and scheduling nothing. It moves with the machine's speed (a
shared VM's drifts by up to 2x over an evening, and a loaded one preempts), so it is timed
beside the engines, in the same minutes (`batching-bench closed`, engines/bench/shares.py;
scripts/closed_ceiling.py on its own): the product is picked from short bursts, which a loaded
host's preemptions mostly miss, and then timed sustained, which they do not.

bfloat16: the products take bf16 operands and accumulate in fp32 (oneDNN's AVX512_BF16 or
AMX kernels where the CPU has them; elsewhere oneDNN converts, and the ceiling says so by being
low). Only dense models with full attention are counted: a mixture of experts or a sliding
window does other arithmetic, and `uncounted` says which.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engines.bench.draws import WorkItem

DTYPES = ("float32", "bfloat16")  # the GEMMs measured here
ROWS = 2048  # rows of the timed products: a prefill step's worth, the GEMMs' best case
CALLS = 20  # timed calls of each product, after 3 warm-up calls


def uncounted(config: Mapping[str, Any]) -> str | None:
    """Why the count does not fit this model (a config's JSON dict), or None where it does."""
    experts = config.get("num_local_experts") or config.get("num_experts")
    window = config.get("sliding_window") if config.get("use_sliding_window", True) else None
    layers = set(config.get("layer_types") or ()) - {"full_attention"}
    found = (f"a mixture of {experts} experts" if experts
             else f"a sliding attention window of {window}" if window
             else f"layers of type {', '.join(sorted(layers))}" if layers else None)
    if found is None:
        return None
    return f"the ceiling counts dense full-attention models only; this one has {found}"


def head_dim(config: Mapping[str, Any]) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def projections(config: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(in, out) of one layer's products: fused QKV, O, fused gate-up, down."""
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    dim = head_dim(config)
    return [(hidden, (heads + 2 * kv_heads) * dim), (heads * dim, hidden),
            (hidden, 2 * inter), (inter, hidden)]


@dataclass(frozen=True, slots=True)
class MixFlops:
    """A closed batch's arithmetic, FLOPs (a multiply-add is 2)."""

    projections: float  # every layer's products, for every token that passes the stack
    lm_head: float  # one row of the LM head per output token
    attention: float  # q.k and p.v, for every query-key pair of causal attention
    output_tokens: int

    @property
    def total(self) -> float:
        return self.projections + self.lm_head + self.attention


def mix_flops(config: Mapping[str, Any], items: Sequence[WorkItem]) -> MixFlops:
    """The arithmetic of serving `items` closed on the model `config` describes: every prompt
    token and every output token but the last passes the stack once (the last is sampled and
    never fed back); each output token takes one row of the LM head; a token at position p
    attends to p + 1 keys."""
    if reason := uncounted(config):
        raise ValueError(f"config: {reason}")
    layers, heads = int(config["num_hidden_layers"]), int(config["num_attention_heads"])
    per_token = 2 * sum(i * o for i, o in projections(config)) * layers
    tokens = outputs = keys = 0
    for item in items:
        span = item.prompt_len + item.max_tokens - 1  # positions that pass the stack
        tokens += span
        outputs += item.max_tokens
        keys += span * (span + 1) // 2  # sum over positions p of p + 1
    attention = 4.0 * heads * head_dim(config) * keys * layers
    head = 2.0 * int(config["hidden_size"]) * int(config["vocab_size"]) * outputs
    return MixFlops(float(per_token * tokens), head, attention, outputs)


def _packed(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x @ weight.T by oneDNN on the weight reordered once into its blocked layout (as the
    paged engine's large projections run, engines.core.ops.Linear), or None without oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return None
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)

    def product(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        return out

    return product


@dataclass(frozen=True, slots=True)
class Product:
    """One GEMM on a model's shape, ready to call: the one a ceiling is timed on."""

    which: str  # the library and the shape
    call: Callable[[], torch.Tensor]
    flops: float  # per call

    def rate(self, calls: int) -> float:
        """GFLOP/s: the mean over `calls` calls after 3 warm-up calls (a burst: the best
        case, which picks the product)."""
        with torch.inference_mode():
            for _ in range(3):
                self.call()
            start = time.perf_counter()
            for _ in range(calls):
                self.call()
            return self.flops * calls / (time.perf_counter() - start) / 1e9

    def sustained(self, seconds: float) -> float:
        """GFLOP/s over calls made for at least `seconds` of wall time (at least one): what
        the host gives it over that span, preemption included, as it gives the engines."""
        with torch.inference_mode():
            start = time.perf_counter()
            calls, elapsed = 0, 0.0
            while calls == 0 or elapsed < seconds:
                self.call()
                calls += 1
                elapsed = time.perf_counter() - start
            return self.flops * calls / elapsed / 1e9


@dataclass(frozen=True, slots=True)
class GemmRate:
    """The best GEMM rate measured on a model's shapes."""

    gflops: float  # GFLOP/s
    which: str  # the library and the shape that reached it


def best_product(config: Mapping[str, Any], dtype: str, *, rows: int = ROWS,
                 calls: int = CALLS) -> tuple[Product, GemmRate]:
    """The fastest `dtype` product on the model's projection and LM-head shapes at `rows`
    rows, on this process's CPU threads, and its rate: MKL's or oneDNN's F.linear, or oneDNN
    on a weight packed once. Each is timed as a burst of `calls` calls, so a loaded host's
    preemptions mostly miss the best one: it picks the product, the ceiling then times it
    sustained (Product.sustained)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype!r} has no ceiling here; expected one of "
                         f"{', '.join(DTYPES)}")
    if rows < 1 or calls < 1:
        raise ValueError(f"rows and calls: must be >= 1, got {rows} and {calls}")
    kind = getattr(torch, dtype)
    shapes = [*projections(config), (int(config["hidden_size"]), int(config["vocab_size"]))]
    best: tuple[Product, GemmRate] | None = None
    gen = torch.Generator().manual_seed(0)
    for inp, out in shapes:
        x = torch.randn(rows, inp, generator=gen).to(kind)
        weight = torch.randn(out, inp, generator=gen).to(kind)
        flops = 2.0 * rows * inp * out
        products = [("F.linear", functools.partial(F.linear, x, weight))]
        if (packed := _packed(weight)) is not None:
            products.append(("oneDNN packed", functools.partial(packed, x)))
        for name, fn in products:
            product = Product(f"{name}, {rows} x {inp} x {out}", fn, flops)
            rate = product.rate(calls)
            if best is None or rate > best[1].gflops:
                best = (product, GemmRate(rate, product.which))
    assert best is not None  # a model has projections
    return best


def best_rate(config: Mapping[str, Any], dtype: str, *, rows: int = ROWS,
              calls: int = CALLS) -> GemmRate:
    """best_product's rate (a burst's)."""
    return best_product(config, dtype, rows=rows, calls=calls)[1]


@dataclass(frozen=True, slots=True)
class Ceiling:
    """A closed batch's ceiling at one dtype: its arithmetic over the mean of the GEMM rates
    sampled (in `closed`, after the warm-ups and after every recorded run)."""

    dtype: str
    flops: MixFlops
    rates: tuple[float, ...]  # GFLOP/s, each sample's
    which: str  # the product timed

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("rates: a ceiling needs at least one measured GEMM rate")

    @property
    def gflops(self) -> float:
        """The mean of the samples: the machine's speed over the minutes they span."""
        return sum(self.rates) / len(self.rates)

    @property
    def seconds(self) -> float:
        return self.flops.total / (self.gflops * 1e9)

    @property
    def tokens_per_s(self) -> float:
        return self.flops.output_tokens / self.seconds

    def line(self) -> str:
        f = self.flops
        spread = (f"{self.rates[0]:.1f}" if len(self.rates) == 1 else
                  f"mean of {len(self.rates)} samples, {min(self.rates):.1f}-"
                  f"{max(self.rates):.1f}")
        return (f"{self.dtype} ceiling: {f.total / 1e9:.2f} GFLOP (projections "
                f"{f.projections / 1e9:.2f}, LM head {f.lm_head / 1e9:.2f}, attention "
                f"{f.attention / 1e9:.2f}) at {self.gflops:.1f} GFLOP/s ({spread}; "
                f"{self.which}): {self.seconds * 1e3:.1f} ms a run, "
                f"{self.tokens_per_s:,.0f} output tok/s")
