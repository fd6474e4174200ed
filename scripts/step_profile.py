"""Where a paged step's time goes, by part: scheduling, building the rows and the attention
plan (block tables, masks, positions), the forward by piece (embedding and rotary, q/k/v,
the pool writes, attention, the rest of each layer, the head), sampling and the output
bookkeeping; decode-only steps and mixed ones (any prompt chunk) apart.

Each part is a wrapper around the function that does it (looked up by name, so the same
script profiles the engine before and after a change: a part the engine no longer has is
left out); a part's time is its own, without the parts it calls. The wrappers cost about
0.3 us a call (printed as `wrapped / bare`: the same mix's step time with and without them).
It looks inside our engine on purpose; engines.bench stays protocol-only.

    python scripts/step_profile.py [--preset tiny] [--runs 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

import engines.paged.engine as paged_engine
import engines.paged.forward as paged_forward
from engines.bench.draws import closed_mix
from engines.paged.variants import equal_memory

# (label, where, attribute): `where` is a module, or "runner"/"engine" for the instance.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("schedule", "engine", "_schedule"),
    ("rows", "engine", "_row"),
    ("block tables", "runner", "_table_rows"),
    ("plan (tables, masks)", "forward", "plan_attention"),
    ("embed + rotary", "runner.embed", "forward"),
    ("embed + rotary", "runner.rotary", "forward"),
    # Before the own forward (652f95e): transformers' norm modules and our fused pieces.
    ("norms", "layers", "ln1"),
    ("norms", "layers", "ln2"),
    ("q/k/v + rope", "runner", "_packed_qkv"),
    ("o-proj + MLP", "runner", "_finish"),
    ("head (norm + lm_head)", "runner", "_logits"),
    # After: engines.core.ops' pieces.
    ("norms", "forward", "rms_norm"),
    ("rope", "forward", "rope"),
    ("matmuls (q/k/v, o, MLP, head)", "Linear", "__call__"),
    ("attention", "forward", "attend"),
    ("compiled graph (packing + the graph)", "runner", "_graph_step"),
    ("compiled graph (packing + the graph)", "runner", "_decode_bucket"),
    ("forward, the rest (packing, pool writes, residuals)", "runner", "_eager"),
    ("forward, the rest (packing, pool writes, residuals)", "runner", "forward"),
    ("sampling", "engine_module", "sample"),
)


class Timer:
    """Exclusive time per label: a call's time minus the wrapped calls it made."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.stack: list[float] = []
        # Per step kind (decode, mixed): each part's time, summed over the recorded steps.
        self.by_kind: dict[str, dict[str, float]] = {}
        self.recording = False

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                children = self.stack.pop()
                self.totals[label] += spent - children
                if self.stack:
                    self.stack[-1] += spent

        return wrapper


def _instrument(engine: Any, timer: Timer) -> None:
    runner = engine.runner
    places: dict[str, Any] = {"engine": engine, "runner": runner, "forward": paged_forward,
                              "engine_module": paged_engine,
                              "Linear": getattr(paged_forward, "Linear", None),
                              "runner.embed": getattr(runner, "embed", None),
                              "runner.rotary": getattr(runner, "rotary", None)}
    for label, where, attr in PARTS:
        if where == "layers":
            for layer in getattr(runner, "layers", []):
                module = getattr(layer, attr, None)
                if isinstance(module, torch.nn.Module) and not hasattr(runner, "packed_layers"):
                    module.forward = timer.wrap(label, module.forward)  # type: ignore[method-assign]
            continue
        target = places[where]
        fn = getattr(target, attr, None) if target is not None else None
        if callable(fn):
            setattr(target, attr, timer.wrap(label, fn))


def _run(preset: str, timer: Timer | None, **options: Any) -> tuple[dict[str, list[float]], int]:
    """One closed mix; per-step wall times by kind (decode, mixed); output tokens."""
    engine = equal_memory(max_batch_size=8, model=preset, **options)
    names = ("plan_attention", "attend", "rms_norm", "rope")
    saved = {name: getattr(paged_forward, name) for name in names if hasattr(paged_forward, name)}
    linear = getattr(paged_forward, "Linear", None)
    saved_call = linear.__dict__["__call__"] if linear is not None else None
    saved_sample = paged_engine.sample
    if timer is not None:
        _instrument(engine, timer)
    try:
        items = closed_mix(vocab_size=engine.vocab_size)
        for i, item in enumerate(items):
            engine.add_request(item.to_request(f"r{i}"))
        steps: dict[str, list[float]] = {"decode": [], "mixed": []}
        tokens = 0
        while engine.has_work():
            kind = ("decode" if all(s.num_pending == 1 for s in engine.running)
                    and not engine.waiting else "mixed")
            before = dict(timer.totals) if timer else {}
            start = time.perf_counter()
            out = engine.step()
            spent = time.perf_counter() - start
            tokens += sum(len(o.token_ids) for o in out)
            steps[kind].append(spent)
            if timer is not None and timer.recording:
                parts = {k: v - before.get(k, 0.0) for k, v in timer.totals.items()}
                parts["output, bookkeeping"] = spent - sum(parts.values())
                into = timer.by_kind.setdefault(kind, defaultdict(float))
                for k, v in parts.items():
                    into[k] += v
        return steps, tokens
    finally:
        for name, fn in saved.items():
            setattr(paged_forward, name, fn)
        if linear is not None:
            linear.__call__ = saved_call  # type: ignore[method-assign]
        paged_engine.sample = saved_sample


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compiled", default="off", help="PagedEngine(compiled=...)")
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--budget", type=int, default=None,
                        help="max_num_batched_tokens (default: the engine's)")
    args = parser.parse_args()
    options: dict[str, object] = {"compiled": args.compiled,
                                  "enable_prefix_caching": not args.no_prefix_caching}
    if args.budget is not None:
        options["max_num_batched_tokens"] = args.budget
    torch.set_num_threads(args.threads)
    gc.disable()
    timer = Timer()
    counts = {"decode": 0, "mixed": 0}
    bare: dict[str, list[float]] = {"decode": [], "mixed": []}
    wrapped: dict[str, list[float]] = {"decode": [], "mixed": []}
    rates = []
    for run in range(args.runs + 1):  # the first: a warm-up, not recorded
        timer.recording = run > 0
        plain, tokens = _run(args.preset, None, **options)
        timed, _ = _run(args.preset, timer, **options)
        if run == 0:
            continue
        for kind in bare:
            bare[kind] += plain[kind]
            wrapped[kind] += timed[kind]
            counts[kind] += len(timed[kind])
        rates.append(tokens / sum(sum(v) for v in plain.values()))
    print(f"{args.preset}, {args.threads} thread(s), the closed mix (32 requests) on "
          f"equal_memory({options}), a fresh engine a run, {args.runs} runs: "
          f"{sorted(rates)[len(rates) // 2]:.0f} output tok/s (unwrapped, engine.step() time "
          "only)")
    for kind in ("decode", "mixed"):
        n = counts[kind]
        if not n:
            continue
        parts = timer.by_kind[kind]
        total = sum(parts.values())
        mean_bare = 1e6 * sum(bare[kind]) / len(bare[kind])
        print(f"\n{kind} steps: {n // args.runs} a run, mean {mean_bare:.0f} us bare, "
              f"{1e6 * total / n:.0f} us wrapped")
        for label, spent in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"  {label:42} {1e6 * spent / n:7.1f} us  {100 * spent / total:5.1f}%")


if __name__ == "__main__":
    main()
