"""The parity oracles: what a request produces when served alone (on an engine of the same
factory, or of a reference factory), the top candidates at a given context, and where two
runs diverge (exact, or tie-aware with margins from an independent source when there is one)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from engines.protocol import Engine, FinishReason, Request, SamplingParams
from engines.testing.crash import EngineCrashed, call_engine
from engines.testing.leaks import shortest_suffix
from engines.testing.pool import EnginePool
from engines.testing.rerun_script import ScriptSetup, rerun_script
from engines.testing.tenant_oracle import NotServable, adapter_named, drop_adapter
from engines.testing.workload import Workload, render_request

__all__ = ["Alone", "AloneOracle", "Divergence", "NotServable", "ParityMode", "TopAt",
           "first_divergence", "served_by"]

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
    # What the request's first output carried (params.prompt_logprobs > 0), else None.
    prompt_logprobs: tuple[Mapping[int, float] | None, ...] | None = None
    # Its streamed text, the deltas concatenated (None: the engine returned none).
    text: str | None = None
    # n > 1: each child's tokens, by index (`tokens` is then child 0's).
    children: tuple[tuple[int, ...], ...] | None = None


class AloneOracle:
    """Serves each (prompt, params) alone on an engine of its own pool, once; then caches.

    The oracle's engines serve one request at a time and never see a workload, so a bug that
    only batching exposes cannot leak into the reference answers. A crash on a reused engine
    is confirmed on a fresh one: if the fresh one serves the request, the crash needs what the
    engine served before, and the report replays that history (engines.testing.leaks).
    """

    def __init__(self, pool: EnginePool, *, deadline: float | None = 60.0,
                 repro_source: str = "# make_engine = <your engine factory>") -> None:
        self.pool = pool
        self.deadline = deadline
        self.repro_source = repro_source  # binds make_engine in a runnable script
        self._cache: dict[tuple[tuple[int, ...], SamplingParams, str | None], Alone] = {}
        self._serial = 0

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        """The request served alone; `lora_path`: under the LoRA adapter in that directory
        (by whatever name the oracle's engine serves it: engines.testing.tenant_oracle),
        NotServable where the engine cannot serve it."""
        key = (tuple(prompt), params, lora_path)
        if key not in self._cache:
            self._cache[key] = self.serve(key[0], params, lora_path=lora_path)
        return self._cache[key]

    def tokens(self, prompt: Sequence[int], params: SamplingParams) -> tuple[int, ...]:
        return self(prompt, params).tokens

    def top_at(self, context: Sequence[int]) -> Mapping[int, float] | None:
        """The top candidates for the token after `context`, greedy, one token served alone
        (None if the engine gives no logprobs)."""
        alone = self(context, SamplingParams(max_tokens=1, logprobs=TOP_K))
        return alone.top_logprobs[0] if alone.top_logprobs else None

    def serve(self, prompt: tuple[int, ...], params: SamplingParams, *,
              lora_path: str | None = None) -> Alone:
        """Serve once, uncached: on a fresh engine when engines are cheap to build."""
        engine, fresh = (self.pool.fresh(), True) if self.pool.cheap else self.pool.acquire()
        self._serial += 1
        try:
            lora, added = adapter_named(engine, lora_path, f"alone#{self._serial}")
        except NotServable:
            self.pool.release(engine)
            raise
        w = Workload((Request(prompt, params, request_id=f"alone#{self._serial}",
                              lora=lora),), (0,))
        history = self.pool.history(engine)
        try:
            alone = _serve_alone(engine, w, self.deadline)
            if added:
                drop_adapter(engine, lora)
        except EngineCrashed as crash:
            self.pool.release(engine, ok=False)
            if fresh or not history or self._fails_after([], w):
                crash.replay = rerun_script("crash", w, ScriptSetup(self.repro_source))
                crash.replay_intro = (f"The request alone on a fresh engine, which "
                                      f"{crash.raises}, as a runnable script")
                raise
            raise self._leak(crash, history, w) from None
        self.pool.served(engine, w)
        self.pool.release(engine)
        return alone

    def _fails_after(self, earlier: Sequence[Workload], w: Workload) -> bool:
        """Whether serving `earlier` then w, each alone and drained, crashes a fresh engine
        on w (False when an earlier one crashes: a different failure)."""
        def crashes(engine: Engine) -> bool:
            try:
                _serve_alone(engine, w, self.deadline)
            except EngineCrashed:
                return True
            return False

        return bool(self.pool.after_history(
            earlier, lambda engine, e: _serve_alone(engine, e, self.deadline), crashes))

    def _leak(self, crash: EngineCrashed, history: Sequence[Workload],
              w: Workload) -> EngineCrashed:
        earlier = shortest_suffix(history, lambda h: self._fails_after(h, w))
        crash.notes.append(
            "On a fresh engine this request is served fine; it crashes on one that has served "
            f"{len(earlier)} earlier request(s) alone, one at a time, each drained (the script "
            "below): state leaks across requests.")
        crash.replay = rerun_script("crash", w, ScriptSetup(self.repro_source), earlier)
        crash.replay_intro = (f"The earlier requests and this one, which {crash.raises}, as a "
                              "runnable script")
        return crash


def served_by(oracle: AloneOracle, prompt: Sequence[int], params: SamplingParams,
              lora_path: str | None) -> Alone | None:
    """What `oracle` (a reference engine's) serves alone, or None where it cannot serve the
    adapter (a comparison with it is then not made)."""
    try:
        return oracle(prompt, params, lora_path=lora_path)
    except NotServable:
        return None


def _serve_alone(engine: Engine, w: Workload, deadline: float | None) -> Alone:
    """w's one request served on engine until it finishes; EngineCrashed if it raises or does
    not finish within w's step bound."""
    request = w.requests[0]
    params, rid = request.params, request.request_id
    tokens: list[int] = []
    tops: list[Mapping[int, float]] | None = [] if params.logprobs else None
    prompt: tuple[Mapping[int, float] | None, ...] | None = None
    text: list[str] = []
    n = params.n if isinstance(params.n, int) and params.n > 1 else 1
    kids: dict[int, list[int]] = {}
    done: set[int] = set()
    bound = w.step_bound()
    where, only = "serving a request alone", lambda: f"only {render_request(request)}"
    call_engine(f"add_request({rid!r})", 0, partial(engine.add_request, request), deadline,
                only, where)
    for k in range(bound):
        for out in call_engine("step()", k, engine.step, deadline, only, where):
            if out.request_id != rid:
                continue
            if n > 1:  # children: each its own stream, the request done when all are
                kids.setdefault(out.index, []).extend(out.token_ids)
                done |= {out.index} if out.finished else set()
                if len(done) >= n:
                    return Alone(tuple(kids.get(0, ())), out.finish_reason, None,
                                 children=tuple(tuple(kids.get(i, ())) for i in range(n)))
                continue
            tokens.extend(out.token_ids)
            if out.text is not None:
                text.append(out.text)
            if prompt is None and out.prompt_logprobs is not None:
                prompt = tuple(out.prompt_logprobs)
            if tops is not None:
                if out.top_logprobs is None:
                    tops = None
                else:
                    tops.extend(out.top_logprobs)
            if out.finished:
                return Alone(tuple(tokens), out.finish_reason,
                             tuple(tops) if tops is not None else None, prompt,
                             "".join(text) if text else None)
    raise EngineCrashed(f"served alone, {render_request(request)} did not finish within "
                        f"{bound} steps", call="step()", step=bound)


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
