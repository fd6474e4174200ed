"""The parity oracles: what a request produces when served alone (on an engine of the same
factory, or of a reference factory), the top candidates at a given context, and where two
runs diverge (exact, or tie-aware with margins from an independent source when there is one)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from engines.protocol import FinishReason, Request, SamplingParams
from engines.testing.pool import EnginePool
from engines.testing.recorder import EngineCrashed, step_deadline
from engines.testing.workload import Workload

__all__ = ["Alone", "AloneOracle", "Divergence", "ParityMode", "TopAt", "first_divergence"]

ParityMode = Literal["exact", "tie-aware"]
TopLogprobs = Sequence[Mapping[int, float]] | None
# Top candidates (token id -> logprob) at generated position p, from an independent engine.
TopAt = Callable[[int], Mapping[int, float] | None]
TOP_K = 5  # candidates asked for where margins are judged (a 4-way tie was seen in bf16)


@dataclass(frozen=True, slots=True)
class Alone:
    tokens: tuple[int, ...]
    finish_reason: FinishReason | None
    top_logprobs: tuple[Mapping[int, float], ...] | None


class AloneOracle:
    """Serves each (prompt, params) alone on an engine of its own pool, once; then caches.

    The oracle's engines serve one request at a time and never see a workload, so a bug that
    only batching exposes cannot leak into the reference answers.
    """

    def __init__(self, pool: EnginePool, *, deadline: float | None = 60.0) -> None:
        self.pool = pool
        self.deadline = deadline
        self._cache: dict[tuple[tuple[int, ...], SamplingParams], Alone] = {}
        self._serial = 0

    def __call__(self, prompt: Sequence[int], params: SamplingParams) -> Alone:
        key = (tuple(prompt), params)
        if key not in self._cache:
            self._cache[key] = self.serve(key[0], params)
        return self._cache[key]

    def tokens(self, prompt: Sequence[int], params: SamplingParams) -> tuple[int, ...]:
        return self(prompt, params).tokens

    def top_at(self, context: Sequence[int]) -> Mapping[int, float] | None:
        """The top candidates for the token after `context`, greedy, one token served alone
        (None if the engine gives no logprobs)."""
        alone = self(context, SamplingParams(max_tokens=1, logprobs=TOP_K))
        return alone.top_logprobs[0] if alone.top_logprobs else None

    def serve(self, prompt: tuple[int, ...], params: SamplingParams) -> Alone:
        """Serve once, uncached: on a fresh engine when engines are cheap to build."""
        engine = self.pool.fresh() if self.pool.cheap else self.pool.acquire()[0]
        self._serial += 1
        rid = f"alone#{self._serial}"
        tokens: list[int] = []
        tops: list[Mapping[int, float]] | None = [] if params.logprobs else None
        reason = None
        ok = False
        try:
            with step_deadline(self.deadline):
                engine.add_request(Request(prompt, params, request_id=rid))
            bound = Workload((Request(prompt, params),), (0,)).step_bound()
            for _ in range(bound):
                with step_deadline(self.deadline):
                    outs = engine.step()
                for out in outs:
                    if out.request_id != rid:
                        continue
                    tokens.extend(out.token_ids)
                    if tops is not None:
                        if out.top_logprobs is None:
                            tops = None
                        else:
                            tops.extend(out.top_logprobs)
                    if out.finished:
                        reason = out.finish_reason
                if reason is not None:
                    ok = True
                    break
        except Exception as exc:
            raise EngineCrashed(
                f"serving Request({prompt!r}, {params!r}) alone, the engine raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            self.pool.release(engine, ok=ok)
        if reason is None:
            raise EngineCrashed(
                f"served alone, Request({prompt!r}, {params!r}) did not finish within "
                f"{bound} steps"
            )
        return Alone(tuple(tokens), reason, tuple(tops) if tops is not None else None)


@dataclass(frozen=True, slots=True)
class Divergence:
    position: int  # index into the generated tokens
    observed: int | None  # None: the batched run ended early
    expected: int | None  # None: the alone run ended early
    margin: float | None  # |logprob(observed) - logprob(expected)| where known
    accepted: bool  # a near-tie that tie-aware mode forgives

    def describe(self) -> str:
        text = (
            f"at generated position {self.position}: alone gave {self.expected}, "
            f"batched gave {self.observed}"
        )
        if self.margin is not None:
            text += f" (logprob margin {self.margin:.3g})"
        return text


def _margin(top: TopLogprobs, pos: int, a: int, b: int) -> float | None:
    if top is None or pos >= len(top):
        return None
    cands = top[pos]
    if a not in cands or b not in cands:
        return math.inf
    return abs(cands[a] - cands[b])


def first_divergence(
    observed: Sequence[int],
    expected: Sequence[int],
    *,
    observed_top: TopLogprobs = None,
    expected_top: TopLogprobs = None,
    top_at: TopAt | None = None,
    mode: ParityMode = "exact",
    tolerance: float = 1e-3,
) -> Divergence | None:
    """The first position where observed and expected differ, or None if they agree.

    tie-aware: a differing token is accepted when it is a near-tie, and comparison of the
    request stops there (everything after a forgiven tie legitimately differs). With `top_at`
    (an independent engine's candidates at the shared context) the margin is judged from it
    alone: both tokens among its candidates, within tolerance. Without it, from the two runs'
    own top_logprobs: each token among the other side's candidates, both gaps within
    tolerance (which trusts the engine under test to report its logprobs honestly).
    """
    for pos in range(max(len(observed), len(expected))):
        o = observed[pos] if pos < len(observed) else None
        e = expected[pos] if pos < len(expected) else None
        if o == e:
            continue
        if o is None or e is None:
            return Divergence(pos, o, e, None, False)
        if top_at is not None:
            m = _margin([top_at(pos) or {}], 0, o, e)
            accepted = mode == "tie-aware" and m is not None and m <= tolerance
            return Divergence(pos, o, e, m, accepted)
        m_obs = _margin(observed_top, pos, o, e)
        m_exp = _margin(expected_top, pos, o, e)
        known = [m for m in (m_obs, m_exp) if m is not None]
        margin = max(known) if known else None
        accepted = (
            mode == "tie-aware"
            and m_obs is not None
            and m_exp is not None
            and max(m_obs, m_exp) <= tolerance
        )
        return Divergence(pos, o, e, margin, accepted)
    return None
