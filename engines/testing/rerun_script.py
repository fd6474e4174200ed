"""The source of a report's script: the failing workload (and the history it needs) as
literals, then one call to engines.testing.rerun.main, which replays and judges it.

A script is the imports, the workload's requests one a line, and that call: a shrunk case
reads in a screenful, and it exits 1 while the bug is there (engines/testing/rerun.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from engines.testing.workload import Workload, render_request

__all__ = ["ScriptSetup", "rerun_script"]


@dataclass(frozen=True, slots=True)
class ScriptSetup:
    """How the suite judged: what the script must rebuild to judge the same way."""

    factory_src: str  # source lines binding `make_engine` (engines.testing.workload)
    reference_src: str | None = None  # the same for the reference engine, where there is one
    variants_src: Mapping[str, str] = field(default_factory=dict)  # by variant name
    # The --parity and --parity-tolerance the suite was given (None: auto, derived), not the
    # choice made from them: the script makes it again from the same declarations.
    parity: str | None = None
    tolerance: float | None = None
    step_timeout: float | None = 60.0
    # --independent-reference: "auto" (the reference's own twin), "off", or a factory's
    # spec, whose source lines (binding `make_engine`) are `independent_src`.
    independent: str = "auto"
    independent_src: str | None = None
    torch_threads: int | None = None  # --torch-threads (None: torch's own)


def _bound_to(src: str, name: str) -> str:
    """factory source lines that bind `name` instead of `make_engine`."""
    src = re.sub(r" as make_engine$", f" as {name}", src, flags=re.M)
    return re.sub(r"^make_engine = ", f"{name} = ", src, flags=re.M)


def _workload_src(w: Workload) -> list[str]:
    lines = ["Workload((", *(f"    {render_request(r)}," for r in w.requests)]
    extra = []
    if w.aborts:
        aborts = ", ".join(f"Abort({a.step}, {a.request_id!r})" for a in w.aborts)
        extra.append(f"aborts=({aborts},)")
    if w.bad:
        bad = []
        for b in w.bad:
            dup = f", duplicate_of={b.duplicate_of!r}" if b.duplicate_of is not None else ""
            bad.append(f"    BadRequest({b.step}, {b.kind!r}, {render_request(b.request)}"
                       f"{dup}),")
        extra.append("bad=(\n" + "\n".join(bad) + "\n)")
    if w.swaps:  # adapters re-added with other weights (the recorder makes the calls)
        swaps = ", ".join(f"AdapterSwap({s.step}, {s.name!r}, {s.like!r})" for s in w.swaps)
        extra.append(f"swaps=({swaps},)")
    return [*lines, f"), {', '.join([f'arrivals={w.arrivals!r}', *extra])})"]


def rerun_script(check: str, w: Workload, setup: ScriptSetup,
                 earlier: Sequence[Workload] = ()) -> str:
    """A runnable script: serve `earlier` (each drained) then w on a fresh engine and judge w
    by `check` ("crash": that it runs to the end)."""
    body: list[str] = []
    for i, e in enumerate(earlier):
        # Ids of their own, as the suite gave them: an id is reusable once finished, but the
        # suite never reused one, so the script must not either.
        e = e.with_ids({r.request_id: f"w{i + 1}.{r.request_id}" for r in e.requests})
        source = _workload_src(e)
        body += [f"# earlier workload {i + 1} of {len(earlier)}: served, then drained",
                 f"earlier{i + 1} = {source[0]}", *source[1:]]
    source = _workload_src(w)
    if earlier:
        body.append("# the failing workload, on the same engine")
    body += [f"workload = {source[0]}", *source[1:]]
    args = [repr(check), "workload", "make_engine"]
    if earlier:
        args.append(f"earlier=[{', '.join(f'earlier{i + 1}' for i in range(len(earlier)))}]")
    heads = []
    if setup.reference_src is not None:
        heads.append(_bound_to(setup.reference_src, "make_reference"))
        args.append("reference=make_reference")
    if setup.independent_src is not None:
        heads.append(_bound_to(setup.independent_src, "make_independent"))
        args.append("independent=make_independent")
    elif setup.independent == "off":
        args.append("independent='off'")
    if setup.variants_src:
        for i, src in enumerate(setup.variants_src.values()):
            heads.append(_bound_to(src, f"make_variant{i}"))
        args.append("variants={" + ", ".join(f"{n!r}: make_variant{i}" for i, n in
                                             enumerate(setup.variants_src)) + "}")
    if setup.parity is not None:
        args.append(f"parity={setup.parity!r}")
    if setup.tolerance is not None and setup.parity != "exact":
        args.append(f"tolerance={setup.tolerance!r}")
    if setup.step_timeout != 60.0:
        args.append(f"step_timeout={setup.step_timeout!r}")
    if setup.torch_threads is not None:
        args.append(f"torch_threads={setup.torch_threads!r}")
    text = "\n".join(body)
    names = ["Request", "SamplingParams"] + (["Guided"] if "Guided(" in text else [])
    kinds = ["Workload"] + [k for k in ("Abort", "AdapterSwap", "BadRequest") if f"{k}(" in text]
    lines = [f"# Replays the failure and judges it by {check!r}: exits 1 while it is there, "
             "0 once fixed",
             "# (--steps prints every step's outputs).",
             f"from engines.protocol import {', '.join(sorted(names))}",
             "from engines.testing.rerun import main",
             f"from engines.testing.workload import {', '.join(kinds)}",
             *heads, setup.factory_src, "", text, f"main({', '.join(args)})"]
    return "\n".join(lines)
