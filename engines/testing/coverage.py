"""What a check exercised, so that "passed" says how much: requests and their kinds, how many
were in flight at once, the edges reached (the whole context, stop tokens at the last
budgeted token, outputs across KV blocks), aborts, bad input, and what was not judged."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engines.protocol import FinishReason
from engines.testing.limits import EngineLimits
from engines.testing.properties import Judge
from engines.testing.properties.seeds import FALSE_ALARM, identical_bound, seed_groups
from engines.testing.recorder import Trace

__all__ = ["Coverage"]

ENGINE = "engine: "  # the engine's own counters: reported even at zero, which says a lot


@dataclass(slots=True)
class Coverage:
    counts: Counter[str] = field(default_factory=Counter)
    most: Counter[str] = field(default_factory=Counter)  # maxima, not sums

    def record(self, trace: Trace, limits: EngineLimits, judge: Judge | None = None) -> None:
        c, w = self.counts, trace.workload
        c["workloads"] += 1
        c["requests"] += len(w.requests)
        c["aborts"] += len(w.aborts)
        c["bad requests"] += len(w.bad)
        for r in w.requests:
            p, toks = r.params, trace.tokens(r.request_id)
            if p.temperature > 0:
                c["seeded" if p.seed is not None else "unseeded"] += 1
            if len(r.prompt_token_ids) + p.max_tokens == limits.max_model_len:
                c["at the whole context"] += 1
            if len(r.prompt_token_ids) + len(toks) > 2 * limits.block:
                c["across 2+ KV blocks"] += 1
            reason = trace.finish_reason(r.request_id)
            if reason == FinishReason.STOP:
                c["stopped" + (" at the last budgeted token"
                               if len(toks) == p.max_tokens else "")] += 1
            self.most["longest prompt"] = max(self.most["longest prompt"],
                                              len(r.prompt_token_ids))
        self.most["in flight at once"] = max(self.most["in flight at once"], _in_flight(trace))
        for name, n in trace.exercised.items():  # the engine's own counters (Exercised)
            c[f"{ENGINE}{name.replace('_', ' ')}"] += n
        if judge is not None:
            self._seed_groups(trace, judge)

    def _seed_groups(self, trace: Trace, judge: Judge) -> None:
        source = judge.reference or judge.oracle
        for group in seed_groups(trace):
            top = source.top_at(group[0].prompt_token_ids)
            judged = top is not None and identical_bound(top, len(group)) < FALSE_ALARM
            self.counts["seed groups judged" if judged else "seed groups NOT judged (no "
                        "logprobs, or a chance of all-identical not below 1e-6)"] += 1

    def merge(self, other: Coverage) -> None:
        self.counts.update(other.counts)
        for key, value in other.most.items():
            self.most[key] = max(self.most[key], value)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> Coverage:
        out = cls()
        for key, value in data.items():
            if key.startswith("max "):
                out.most[key[4:]] = value
            else:
                out.counts[key] = value
        return out

    def as_dict(self) -> dict[str, int]:
        return {**self.counts, **{f"max {k}": v for k, v in self.most.items()}}

    @staticmethod
    def describe(data: dict[str, int]) -> str:
        ours = [f"{v} {k}" if not k.startswith("max ") else f"{k[4:]} {v}"
                for k, v in data.items() if v and not k.startswith(ENGINE)]
        engines = [f"{v} {k.removeprefix(ENGINE)}" for k, v in data.items()
                   if k.startswith(ENGINE)]
        return ", ".join(ours) + (f"; the engine counted {', '.join(engines)}"
                                  if engines else "")


def _in_flight(trace: Trace) -> int:
    w = trace.workload
    most = 0
    for k in range(len(trace.steps)):
        live = sum(1 for r, s in zip(w.requests, w.arrivals, strict=True)
                   if s <= k and trace.finished_at.get(r.request_id, k) >= k)
        most = max(most, live)
    return most
