"""Engine factories from specs: `module:callable` (or `label=module:callable`) -> a
zero-argument callable that returns a fresh engine; and telling an engine from a non-engine.
A spec that is a server's URL (`http://HOST:PORT?vocab_size=N...`) is an HTTP adapter over it
(engines.adapters.http.url, imported by name only when such a spec is given).

The one loader: the conformance suite's `--engine`, `--reference-engine` and
`--engine-variant`, and the bench's `--engine`, all go through it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from engines.protocol import Engine

__all__ = [
    "EngineSpecError",
    "check_engine",
    "engine_name",
    "load_factory",
    "load_labeled",
    "missing_members",
    "split_label",
]

_ENGINE_MEMBERS = ("add_request", "step", "has_work", "vocab_size", "max_model_len")
_SLOT_MEMBERS = ("max_batch_size", "wasted_slot_steps", "slot_table", "slot_lengths")
_CALLABLE = {"add_request", "step", "has_work", "slot_table", "slot_lengths", "abort_request"}


class EngineSpecError(Exception):
    """The engine spec or factory is unusable; the message says why and what to do."""


def load_factory(spec: str, *, option: str = "--engine") -> Callable[[], Engine]:
    """'package.module:callable' -> the callable (a class or a zero-argument function).

    option: how the spec was given, for error messages ('--reference-engine', ...).
    """
    if is_url(spec):
        return _url_factory(spec, option)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise EngineSpecError(
            f"{option} {spec!r}: expected 'module:callable', e.g. "
            "'engines.slot.continuous:ContinuousBatchEngine' or 'mypkg.engines:make_engine'"
        )
    # Like `uvicorn app:app`: a module next to where pytest runs is importable without
    # installing it first.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise EngineSpecError(
            f"{option} {spec!r}: importing module {module_name!r} failed with "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EngineSpecError(
                f"{option} {spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise EngineSpecError(
            f"{option} {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable that "
            "returns an engine"
        )
    return obj  # type: ignore[no-any-return]


def is_url(spec: str) -> bool:
    """Whether a spec names a server by URL rather than a `module:callable`."""
    return spec.strip().lower().startswith(("http://", "https://"))


def _url_factory(spec: str, option: str) -> Callable[[], Engine]:
    try:
        url = importlib.import_module("engines.adapters.http.url")
    except ImportError as exc:
        raise EngineSpecError(f"{option} {spec!r}: a server URL needs the HTTP adapter, whose "
                              f"import failed ({exc}): install the extra "
                              "batching-engines[http] (httpx)") from exc
    try:
        return url.url_factory(spec)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise EngineSpecError(f"{option} {spec!r}: {exc}") from None


def split_label(spec: str) -> tuple[str | None, str]:
    """'label=module:callable' -> ('label', 'module:callable'); no label -> (None, spec)."""
    label, sep, target = spec.partition("=")
    if sep and label and ":" not in label:
        return label.strip(), target.strip()
    return None, spec.strip()


def load_labeled(spec: str, *, option: str = "--engine") -> tuple[str, Callable[[], Engine]]:
    """'[label=]module:callable' -> (label, factory); the label defaults to the callable's
    name (engine_name)."""
    label, target = split_label(spec)
    factory = load_factory(target, option=option)
    return label or engine_name(factory), factory


def missing_members(obj: object, *, slots: bool = False) -> list[str]:
    """Protocol members obj lacks (methods that are not callable count as missing)."""
    names = _SLOT_MEMBERS if slots else _ENGINE_MEMBERS
    return [
        n for n in names
        if not hasattr(obj, n) or (n in _CALLABLE and not callable(getattr(obj, n)))
    ]


def check_engine(obj: object, source: str) -> Engine:
    """obj if it speaks engines.protocol.Engine, else EngineSpecError naming what is missing."""
    missing = missing_members(obj)
    if missing:
        raise EngineSpecError(
            f"{source} returned {type(obj).__module__}.{type(obj).__qualname__}, which is not an "
            f"engine: it lacks {', '.join(missing)} (engines.protocol.Engine needs "
            f"{', '.join(_ENGINE_MEMBERS)})"
        )
    return obj  # type: ignore[return-value]


def engine_name(factory: Callable[..., Any]) -> str:
    """A short name for test ids: the class or function name."""
    return str(getattr(factory, "__name__", None) or type(factory).__name__)
