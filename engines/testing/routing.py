"""Which reference serves a request alone: an independent one for every feature it serves,
the given one for the rest (issue 52).

The usual reference, engines.sequential, runs transformers' forward but engines/core's
processing after the logits, the code our engines run too: a bug there is made alike by the
engine and that reference, and reference parity cannot see it. A reference that names an
independent twin (engines.protocol.IndependentTwin: the same weights and dtype, processing
that is other people's code) keeps the requests it judges alike with any reference (plain
ones, the top candidates at a context), which it serves fast, and every request that uses a
feature beyond BASE_PARAMS goes to the twin. Each request is served alone on an engine of its
own, so sending one here and one there changes no other answer.

The twin is built at the first request sent to it. One it cannot serve (a field it does not
declare, an adapter it cannot load, a request past its context) is served by the given
reference instead and counted as such, never silently: the summary says how many requests of
each feature each reference served (`counts`, `lines`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Literal

from engines.factories import EngineSpecError
from engines.protocol import BASE_PARAMS, Engine, SamplingParams, capabilities_of
from engines.testing.oracle import Alone, AloneOracle, NotServable
from engines.testing.pool import EnginePool
from engines.testing.workload import factory_source

__all__ = ["INDEPENDENT", "PLAIN", "RoutedOracle", "Twin", "describe", "features_of",
           "lines", "routed_during", "twin_of"]

Factory = Callable[[], Engine]
Who = Literal["independent", "given", "fallback"]
INDEPENDENT: Who = "independent"
PLAIN = "plain"  # a request using no feature beyond BASE_PARAMS (the top candidates included)
_DEFAULT = SamplingParams()
_FIELDS = tuple(f.name for f in fields(SamplingParams))


@dataclass(frozen=True, slots=True)
class Twin:
    factory: Factory
    source: str  # how the header and the summary name it
    spec: str | None = None  # --independent-reference MODULE:CALLABLE, where it was named


def twin_of(reference: Engine, setting: str, factory: Factory | None) -> Twin | None:
    """The twin the suite routes to: `factory` (--independent-reference MODULE:CALLABLE),
    none ("off"), or ("auto") the one the reference names, if any."""
    if setting == "off":
        return None
    if factory is not None:
        return Twin(factory, setting, setting)
    method = getattr(reference, "independent_twin", None)
    found = method() if callable(method) else None
    if found is None:
        return None
    return Twin(found, _named(factory_source(found, None)))


def _named(source: str) -> str:
    """A factory's source lines, as one phrase (`partial(IndependentEngine, 'tiny', ...)`)."""
    last = source.splitlines()[-1]
    return last.removeprefix("make_engine = ").removeprefix("from ").replace(
        " import ", ":").removesuffix(" as make_engine")


def features_of(params: SamplingParams, lora_path: str | None) -> frozenset[str]:
    """What a request uses beyond BASE_PARAMS: each field it sets, and "lora"."""
    used = {n for n in _FIELDS if n not in BASE_PARAMS
            and getattr(params, n) != getattr(_DEFAULT, n)}
    return frozenset(used | ({"lora"} if lora_path is not None else set()))


class RoutedOracle(AloneOracle):
    """An AloneOracle (the judge's reference) that serves each request on the given
    reference's oracle or on its twin's, by the features it uses; `counts` holds
    "<who>: <feature>" -> requests served (who: independent, given, fallback)."""

    def __init__(self, given: AloneOracle, twin: Twin, *, vocab_size: int,
                 logprobs_of: str) -> None:
        super().__init__(given.pool, deadline=given.deadline, repro_source=given.repro_source)
        self.given = given
        self.twin = twin
        self._vocab, self._logprobs_of = vocab_size, logprobs_of
        self._twin: AloneOracle | None = None
        self._serves: frozenset[str] = frozenset()  # what the twin declares
        self._context = 0  # the twin's max_model_len
        self.counts: Counter[str] = Counter()

    @property
    def pools(self) -> tuple[EnginePool, ...]:
        return (self.pool, *((self._twin.pool,) if self._twin is not None else ()))

    def serve(self, prompt: tuple[int, ...], params: SamplingParams, *,
              lora_path: str | None = None) -> Alone:
        used = features_of(params, lora_path)
        if not used:
            self.counts[f"given: {PLAIN}"] += 1
            return self.given.serve(prompt, params, lora_path=lora_path)
        twin = self._built()
        if used <= self._serves and len(prompt) + params.max_tokens <= self._context:
            try:
                alone = twin.serve(prompt, params, lora_path=lora_path)
            except NotServable:
                pass
            else:
                self.counts.update(f"{INDEPENDENT}: {f}" for f in used)
                return alone
        self.counts.update(f"fallback: {f}" for f in used)
        return self.given.serve(prompt, params, lora_path=lora_path)

    def _built(self) -> AloneOracle:
        """The twin's oracle, built at its first request: one engine probed for what it
        serves; one over another vocabulary, or whose top logprobs are of another kind than
        the given reference's, is an error naming it."""
        if self._twin is None:
            pool = EnginePool(self.twin.factory, f"the independent reference {self.twin.source}")
            engine = pool.fresh()
            caps = capabilities_of(engine)
            if int(engine.vocab_size) != self._vocab:
                raise EngineSpecError(f"independent reference {self.twin.source}: vocab_size "
                                      f"{engine.vocab_size}, but the reference engine's is "
                                      f"{self._vocab} (not the same model?)")
            if caps.logprobs_of != self._logprobs_of:
                raise EngineSpecError(f"independent reference {self.twin.source}: its top "
                                      f"logprobs are {caps.logprobs_of}, the reference "
                                      f"engine's {self._logprobs_of}")
            self._serves = frozenset(caps.supported_sampling)
            self._context = int(engine.max_model_len)
            pool.release(engine)
            self._twin = AloneOracle(pool, deadline=self.deadline, repro_source=factory_source(
                self.twin.factory, self.twin.spec))
        return self._twin


def lines(counts: Mapping[str, int]) -> list[str]:
    """The summary's sentences on one engine's run: the requests each reference served alone,
    by feature (counts: RoutedOracle.counts, summed over the run's checks; none without a
    twin, where the header says the reference engine judged every feature)."""
    def listed(who: str) -> str:
        found = sorted((k.split(": ", 1)[1], v) for k, v in counts.items()
                       if k.startswith(f"{who}: ") and v)
        return ", ".join(f"{f} {v}" for f, v in found)

    if not any(counts.values()):
        return []
    out = [f"reference: requests served alone by the independent reference, by feature: "
           f"{listed(INDEPENDENT) or 'none'}; by the reference engine: "
           f"{listed('given') or 'none'}"]
    fell = listed("fallback")
    if fell:
        out.append("reference: not servable by the independent reference, so served by the "
                   f"reference engine (a bug made alike there is not seen): {fell}")
    return out


@contextmanager
def routed_during(reference: AloneOracle | None, properties: list[tuple[str, object]],
                  key: str) -> Iterator[None]:
    """Records in a test's user properties, under `key`, the requests each reference served
    alone while the block ran, failed or not (none where the reference routes nothing)."""
    before = Counter(reference.counts) if isinstance(reference, RoutedOracle) else None
    try:
        yield
    finally:
        if isinstance(reference, RoutedOracle) and before is not None:
            served = Counter(reference.counts)
            served.subtract(before)
            properties.append((key, {k: v for k, v in served.items() if v > 0}))


def describe(given: str, twin: Twin | None, setting: str) -> str:
    """The header's line: who judges which feature."""
    if twin is not None:
        return (f"reference engine {given} for plain requests and top candidates; every "
                f"feature the independent reference {twin.source} serves is judged by it")
    if setting == "off":
        return f"reference engine {given} for every feature (--independent-reference off)"
    return (f"reference engine {given} for every feature (it names no independent twin: "
            "engines.protocol.IndependentTwin; --independent-reference MODULE:CALLABLE names "
            "one)")
