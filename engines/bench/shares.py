"""`batching-bench closed`'s share of the ceiling: each engine's closed tok/s over the tok/s
the core could reach on the same batch at the engine's dtype (engines.bench.ceiling).

Each ceiling's GEMM (the fastest product on the model's shapes, picked once from bursts) is
timed for SAMPLE_S of wall time after the warm-ups (where a compiled engine compiles) and
after every recorded run, on the bench's own threads, and the ceiling takes the mean rate:
the host's speed over the same minutes as the engines' runs, preemptions included as they
are in the engines' wall time, so that a share is a ratio at one load. An engine is compared with
the ceiling of the dtype it declares (Capabilities.dtype); one that declares none, with
--dtype's. Where no share can be given (--no-ceiling, another device, a model the count does
not fit, an engine on another vocabulary or dtype) the output says why, engine by engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engines.bench.ceiling import DTYPES, Ceiling, Product, best_product, mix_flops, uncounted
from engines.bench.draws import WorkItem
from engines.models import PRESETS
from engines.protocol import Engine, capabilities_of

SAMPLE_S = 0.25  # seconds of wall time each sample of a ceiling's GEMM runs


def model_config(preset: str) -> dict[str, Any] | str:
    """The config of a preset or checkpoint directory, or why there is none to count."""
    if preset in PRESETS:
        return dict(PRESETS[preset].config)
    path = Path(preset) / "config.json"
    if path.is_file():
        found: dict[str, Any] = json.loads(path.read_text())
        return found
    return f"--preset {preset!r} is neither a preset nor a directory with a config.json"


def engine_dtype(engine: Engine, default: str) -> tuple[str, str]:
    """(dtype, where it came from): the engine's declared Capabilities.dtype, else `default`."""
    if callable(getattr(engine, "capabilities", None)):
        return capabilities_of(engine).dtype, "declared"
    return default, "not declared: --dtype's"


@dataclass(frozen=True, slots=True)
class Share:
    """An engine's closed tok/s against its dtype's ceiling."""

    dtype: str
    ceiling_tokens_per_s: float
    share: float  # tok/s over the ceiling's


@dataclass(slots=True)
class CeilingRun:
    """The ceilings one closed run measures, and which engine is compared with which."""

    config: Mapping[str, Any] | None  # the model counted; None: no ceiling at all
    items: Sequence[WorkItem]
    dtypes: dict[str, str]  # engine -> the dtype of its ceiling
    skipped: dict[str, str]  # engine (or "" for all of them) -> why it has no share
    threads: int
    products: dict[str, Product] = field(default_factory=dict)  # dtype -> the GEMM timed
    rates: dict[str, list[float]] = field(default_factory=dict)  # dtype -> GFLOP/s samples
    calls: int = 10  # each burst's, picking the product

    @classmethod
    def plan(cls, engines: Mapping[str, Engine], items: Sequence[WorkItem], *, preset: str,
             device: str, dtype: str, enabled: bool = True) -> CeilingRun:
        """What to measure for `engines` serving `items`, or why nothing (said per engine)."""
        threads = torch.get_num_threads()
        found = model_config(preset)
        reason = ("off (--no-ceiling)" if not enabled
                  else f"measured on CPU cores only, and this run is on {device}"
                  if not device.startswith("cpu")
                  else found if isinstance(found, str) else uncounted(found))
        if reason is not None or isinstance(found, str):
            return cls(None, items, {}, {"": reason or ""}, threads)
        dtypes: dict[str, str] = {}
        skipped: dict[str, str] = {}
        for name, engine in engines.items():
            kind, source = engine_dtype(engine, dtype)
            if int(engine.vocab_size) != int(found["vocab_size"]):
                skipped[name] = (f"vocab {engine.vocab_size}, not preset {preset}'s "
                                 f"{found['vocab_size']}: another model than the one counted")
            elif kind not in DTYPES:
                skipped[name] = f"dtype {kind} ({source}): no ceiling measured at it"
            else:
                dtypes[name] = kind
        return cls(found, items, dtypes, skipped, threads)

    def sample(self) -> None:
        """One sustained GEMM rate per dtype in use (its product picked on the first call):
        called after the warm-ups and after every recorded run."""
        if self.config is None:
            return
        for kind in dict.fromkeys(self.dtypes.values()):
            if kind not in self.products:
                self.products[kind] = best_product(self.config, kind, calls=self.calls)[0]
            self.rates.setdefault(kind, []).append(self.products[kind].sustained(SAMPLE_S))

    def ceilings(self) -> dict[str, Ceiling]:
        if self.config is None:
            return {}
        flops = mix_flops(self.config, self.items)
        return {kind: Ceiling(kind, flops, tuple(rates), self.products[kind].which)
                for kind, rates in self.rates.items()}

    def share(self, engine: str, tokens_per_s: float) -> Share | None:
        ceiling = self.ceilings().get(self.dtypes.get(engine, ""))
        if ceiling is None:
            return None
        return Share(ceiling.dtype, ceiling.tokens_per_s,
                     tokens_per_s / ceiling.tokens_per_s)

    def notes(self, tokens_per_s: Mapping[str, float]) -> list[str]:
        """The closing lines: each ceiling, each engine's share or why it has none."""
        if "" in self.skipped:
            return [f"ceiling: not measured, {self.skipped['']}"]
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        lines = [f"{c.line()}; on {threads}, sampled after the warm-ups and each recorded run"
                 for c in self.ceilings().values()]
        for name, rate in tokens_per_s.items():
            found = self.share(name, rate)
            if found is not None:
                lines.append(f"{name}: {rate:,.1f} tok/s, {found.share:.1%} of the "
                             f"{found.dtype} ceiling")
            else:
                lines.append(f"{name}: no share of a ceiling, "
                             f"{self.skipped.get(name, 'no ceiling measured')}")
        return lines
