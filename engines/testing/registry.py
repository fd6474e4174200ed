"""Discovery shared by the two registries (engines.testing.checks, engines.testing.features):
every module of a package but a few holds one object, bound to a fixed name and named after
the file; a mismatch is an error at import, never an entry that silently does nothing."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Iterable, Sequence
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)

__all__ = ["discover"]


def discover(package: str, path: Iterable[str], attr: str, kind: type[T], *,
             order: Sequence[str], skip: Collection[str]) -> tuple[T, ...]:
    """Each module of `package` (at `path`) but `skip` and private ones binds `attr` to a
    `kind` named after the file; returned in `order`, those it does not name last, by name."""
    found: dict[str, T] = {}
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if info.name in skip or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        entry = getattr(module, attr, None)
        if not isinstance(entry, kind) or entry.name != info.name:
            raise ImportError(f"{module.__name__} must bind {attr} to the {kind.__name__} named "
                              f"{info.name!r}; it binds {entry!r}")
        found[entry.name] = entry
    rank = {name: i for i, name in enumerate(order)}
    return tuple(sorted(found.values(), key=lambda e: rank.get(e.name, len(order))))
