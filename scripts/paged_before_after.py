"""The paged engine before and after a change, paired in one process: the closed mix (32
requests) on `equal_memory`, runs alternated between the two, each engine fresh per run
(so no prefix-cache hits carry over), output tok/s per run and their ratio.

The "before" is another checkout's `engines` package (e.g. `git archive 652f95e | tar -x -C
/tmp/base`), copied under the name `engines_base` with its imports rewritten, so that both
import side by side.

    python scripts/paged_before_after.py /tmp/base [--preset tiny] [--runs 7] \\
        [--after compiled=step]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from engines.bench.draws import closed_mix


def _import_base(checkout: Path) -> Any:
    """The base checkout's engines package as `engines_base` (its paged variants module)."""
    root = Path(tempfile.mkdtemp(prefix="engines-base-"))
    shutil.copytree(checkout / "engines", root / "engines_base")
    for path in (root / "engines_base").rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bfrom engines(\.| import)", r"from engines_base\1", text)
        text = re.sub(r"\bimport engines\.", "import engines_base.", text)
        text = text.replace('"engines.', '"engines_base.')
        path.write_text(text)
    sys.path.insert(0, str(root))
    import importlib

    return importlib.import_module("engines_base.paged.variants")


def _run(engine: Any, items: list[Any], protocol: Any, tag: str) -> float:
    for i, item in enumerate(items):
        request = item.to_request(f"{tag}{i}")
        engine.add_request(protocol.Request(request.prompt_token_ids, protocol.SamplingParams(
            max_tokens=request.params.max_tokens), request_id=request.request_id))
    tokens, start = 0, time.perf_counter()
    while engine.has_work():
        tokens += sum(len(o.token_ids) for o in engine.step())
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("base", type=Path, help="a checkout of the version to compare with")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--after", action="append", default=[], metavar="KEY=VALUE",
                        help="an equal_memory option of the current engine (compiled=step)")
    parser.add_argument("--before", action="append", default=[], metavar="KEY=VALUE",
                        help="an equal_memory option of the base engine")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base_variants = _import_base(args.base)
    import engines.paged.variants as after_variants
    import engines.protocol as after_protocol

    base_protocol = sys.modules["engines_base.protocol"]
    options = dict(kv.split("=", 1) for kv in args.after)
    before = dict(kv.split("=", 1) for kv in args.before)
    make = {"before": lambda: base_variants.equal_memory(model=args.preset, **before),
            "after": lambda: after_variants.equal_memory(model=args.preset, **options)}
    protocols = {"before": base_protocol, "after": after_protocol}
    vocab = {"tiny": 1024, "small": 8192}.get(args.preset, 1024)
    items = closed_mix(vocab_size=vocab)
    rates: dict[str, list[float]] = {"before": [], "after": []}
    for run in range(args.runs + 1):  # the first: warm-up (and compiles), not recorded
        for name in ("before", "after"):
            rate = _run(make[name](), items, protocols[name], f"{name}{run}-")
            if run:
                rates[name].append(rate)
    ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    print(f"{args.preset}, {args.threads} thread(s), fresh engines, {args.runs} paired runs: "
          f"before {statistics.median(rates['before']):.0f} tok/s ({before or 'defaults'}), "
          f"after "
          f"{statistics.median(rates['after']):.0f} tok/s ({options or 'defaults'}); after / "
          f"before median {statistics.median(ratios):.2f}, per run "
          f"{', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
