"""A workload: requests with arrival steps, aborts and bad requests; and its repro snippet.

Display ids ("r0", "bad1") are what a reader sees; the driver gives every run its own
unique runtime ids, so one engine can serve many workloads in a row.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engines.factories import is_url
from engines.protocol import Request, SamplingParams

__all__ = [
    "Abort",
    "BadRequest",
    "Workload",
    "factory_source",
    "render_request",
    "repro_sequence",
    "repro_snippet",
    "repro_variant",
]



def _children(r: Request) -> int:
    """How many children the request has (n > 1), each served in full, perhaps in turn."""
    n = r.params.n
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1

@dataclass(frozen=True, slots=True)
class Abort:
    step: int  # abort_request is called just before this step() call
    request_id: Hashable  # display id of one of the workload's requests


@dataclass(frozen=True, slots=True)
class BadRequest:
    step: int  # add_request is called just before this step() call
    kind: str  # what is wrong with it, in words
    request: Request  # for kind "duplicate id": a copy of an in-flight request's id
    duplicate_of: Hashable | None = None  # display id whose runtime id it reuses


@dataclass(frozen=True, slots=True)
class Workload:
    requests: tuple[Request, ...]  # good requests, display ids r0, r1, ...
    arrivals: tuple[int, ...]  # arrival step of each request, same order
    aborts: tuple[Abort, ...] = ()
    bad: tuple[BadRequest, ...] = ()
    label: str = field(default="", compare=False)  # e.g. the seed workload's name

    def __post_init__(self) -> None:
        assert len(self.requests) == len(self.arrivals), "one arrival step per request"

    def with_ids(self, ids: Mapping[Hashable, Hashable]) -> Workload:
        """The same workload with its requests' display ids renamed by `ids`."""
        return Workload(
            tuple(dataclasses.replace(r, request_id=ids[r.request_id]) for r in self.requests),
            self.arrivals,
            tuple(dataclasses.replace(a, request_id=ids[a.request_id]) for a in self.aborts),
            tuple(dataclasses.replace(b, duplicate_of=ids[b.duplicate_of])
                  if b.duplicate_of is not None else b for b in self.bad),
            self.label,
        )

    @property
    def last_event_step(self) -> int:
        steps = [*self.arrivals, *(a.step for a in self.aborts), *(b.step for b in self.bad)]
        return max(steps, default=0)

    def step_bound(self) -> int:
        """Steps within which every request must finish: generous for any sane scheduler (one
        request at a time, its prompt prefilled 4 tokens a step, everything recomputed once
        after a preemption), so only a stuck engine exceeds it."""
        work = sum((2 * (r.params.max_tokens + 2) + -(-len(r.prompt_token_ids) // 4))
                   * _children(r) for r in self.requests)
        return self.last_event_step + work + 8

    def __repr__(self) -> str:
        reqs = ", ".join(
            f"{r.request_id}@{s}:{len(r.prompt_token_ids)}+{r.params.max_tokens}"
            for r, s in zip(self.requests, self.arrivals, strict=True)
        )
        extra = "".join(f", abort {a.request_id}@{a.step}" for a in self.aborts)
        extra += "".join(f", bad {b.kind}@{b.step}" for b in self.bad)
        return f"Workload({reqs}{extra})"


def _params_src(p: SamplingParams) -> str:
    defaults = SamplingParams()
    parts = [
        f"{name}={getattr(p, name)!r}"
        for name in SamplingParams.__dataclass_fields__  # every field, in declared order
        if getattr(p, name) != getattr(defaults, name)
    ]
    return f"SamplingParams({', '.join(parts)})"


def render_request(r: Request) -> str:
    tenant = (f", lora={r.lora!r}" if r.lora is not None else "") + (
        f", cache_salt={r.cache_salt!r}" if r.cache_salt is not None else "")
    return (f"Request({r.prompt_token_ids!r}, {_params_src(r.params)}, "
            f"request_id={r.request_id!r}{tenant})")


def factory_source(factory: Callable[..., Any], spec: str | None) -> str:
    """Source lines binding `make_engine` for a runnable script."""
    if spec and is_url(spec):
        # A server by URL: the same loader the suite used (engines.factories).
        return f"from engines.factories import load_factory\nmake_engine = load_factory({spec!r})"
    if spec:
        module, _, attr = spec.partition(":")
        head, _, rest = attr.partition(".")
        if not rest:
            return f"from {module} import {head} as make_engine"
        return f"from {module} import {head}\nmake_engine = {attr}"
    if isinstance(factory, functools.partial):
        inner = factory_source(factory.func, None)
        if inner.startswith("from "):
            args = [repr(a) for a in factory.args]
            args += [f"{k}={v!r}" for k, v in factory.keywords.items()]
            return (f"{inner.replace(' as make_engine', '')}\nfrom functools import partial\n"
                    f"make_engine = partial({factory.func.__name__}, {', '.join(args)})")
    where = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    if where and where != "__main__" and qualname and "<" not in qualname:
        return f"from {where} import {qualname.split('.')[0]} as make_engine"
    return "make_engine = ...  # your engine factory (what the engine_factory fixture returns)"


def repro_snippet(workload: Workload, factory_src: str, steps: int) -> str:
    """A short runnable script that replays the workload and prints every step's outputs.

    factory_src: source lines that bind `make_engine` (an import, or a comment asking the
    reader to supply their factory).
    """
    return repro_sequence([], workload, factory_src, steps)


def repro_sequence(earlier: Sequence[Workload], workload: Workload, factory_src: str,
                   steps: int) -> str:
    """repro_snippet on an engine that first serves `earlier` (each drained, silently)."""
    lines = [factory_src, "from engines.protocol import Guided, Request, SamplingParams", "",
             "engine = make_engine()"]
    for i, w in enumerate(earlier):
        # Ids of their own, as the suite gave them: an id is reusable once finished, but the
        # suite never reused one, so the script must not either.
        w = w.with_ids({r.request_id: f"w{i + 1}.{r.request_id}" for r in w.requests})
        lines += [f"# earlier workload {i + 1} of {len(earlier)}: served, then drained"]
        lines += _replay(w, w.last_event_step + 1, show=False)
        lines += ["while engine.has_work():", "    engine.step()", ""]
    if earlier:
        lines.append("# the failing workload, on the same engine")
    return "\n".join(lines + _replay(workload, steps, show=True))


def repro_variant(workload: Workload, factory_src: str, variant_src: str, variant: str,
                  steps: int) -> str:
    """repro_snippet on the main engine and then on a config variant, each freshly built, so
    that the two runs' outputs print one after the other. variant_src binds `make_engine` to
    the variant's factory, as factory_src does to the main one."""
    lines = [factory_src, "make_main = make_engine", variant_src, "make_variant = make_engine",
             "from engines.protocol import Request, SamplingParams", "",
             f"for label, make_engine in (('main engine', make_main), "
             f"({f'variant {variant!r}'!r}, make_variant)):",
             "    print('#', label)", "    engine = make_engine()"]
    return "\n".join(lines + [f"    {line}" for line in _replay(workload, steps, show=True)])


def _by_step(entries: list[tuple[int, str]], name: str) -> list[str]:
    lines = [f"{name} = {{"]
    by_step: dict[int, list[str]] = {}
    for s, src in entries:
        by_step.setdefault(s, []).append(src)
    for s in sorted(by_step):
        lines.append(f"    {s}: [")
        lines.extend(f"        {x}" for x in by_step[s])
        lines.append("    ],")
    return [*lines, "}"]


def _replay(workload: Workload, steps: int, *, show: bool) -> list[str]:
    lines = _by_step([(s, f"{render_request(r)},")
                      for r, s in zip(workload.requests, workload.arrivals, strict=True)],
                     "arrivals")
    bad = []
    for b in workload.bad:
        src = render_request(b.request)
        if b.duplicate_of is not None:
            old_id = f"request_id={b.request.request_id!r}"
            src = src.replace(old_id, f"request_id={b.duplicate_of!r}")
        bad.append((b.step, f"{src},  # bad: {b.kind}"))
    if bad:
        lines += _by_step(bad, "bad")
    aborts: dict[int, list[Hashable]] = {}
    for a in workload.aborts:
        aborts.setdefault(a.step, []).append(a.request_id)
    lines.append(f"aborts = {aborts!r}")
    # The good requests outside any try: an engine that raises on one raises here too. The
    # bad ones after them, as the suite sends them; their refusals are expected.
    lines += [
        f"for step in range({steps}):",
        "    for request in arrivals.get(step, []):",
        "        engine.add_request(request)",
    ]
    if bad:
        refused = "            print(step, 'refused', request.request_id, refused)"
        lines += [
            "    for request in bad.get(step, []):",
            "        try:",
            "            engine.add_request(request)",
            "        except ValueError as refused:",
            refused if show else "            pass",
        ]
    lines += [
        "    for request_id in aborts.get(step, []):",
        "        engine.abort_request(request_id)",
        "    print(step, engine.step(), engine.has_work())" if show else "    engine.step()",
    ]
    if show:  # the slot table after each step, where the engine offers one
        lines += ["    if hasattr(engine, 'slot_table'):",
                  "        print('  slots', list(engine.slot_table()))"]
    return lines
