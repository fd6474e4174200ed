"""What a check exercised, so that "passed" says how much: requests and their kinds, how many
were in flight at once, the edges reached (the whole context, stop tokens at the last
budgeted token, outputs across KV blocks), aborts, bad input, and what was not judged and why.
A counter is kept only for what the engine has: no KV-block count for an engine without
KVIntrospection (the strategies still cross 16-token "blocks", but they are a guess there).
No counter is about slots: occupancy is read from the trace ("in flight at once").

What is counted of every workload is here; what a check counts of its own judgement is its
`Tally`, beside its property (engines/testing/checks/<check>.py), and so are the sentences its
counters call for. A key of the form `topic: detail` (a one-word topic, e.g. "limits: ...")
is material for those sentences, not for the one-line summary."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engines.protocol import (
    CONSTRAINT_PARAMS,
    PROCESSING_PARAMS,
    FinishReason,
    Request,
    SamplingParams,
)
from engines.testing.limits import EngineLimits
from engines.testing.recorder import Trace
from engines.testing.strategies import is_near_miss

__all__ = ["BEAMS_UNFIT", "GREEDY_ONLY", "UNDRAWN", "Coverage", "Tally", "noted"]

ENGINE = "engine: "  # the engine's own counters: reported even at zero, which says a lot
# The logits-processing fields of SamplingParams: requests drawn with each are counted, and
# those not drawn (an engine compared does not declare them) are named in a note.
PROCESSED = PROCESSING_PARAMS
# The constraints (engines.testing.features.constraints), counted and named alike.
DRAWN_FIELDS = PROCESSED | CONSTRAINT_PARAMS
UNDRAWN = "sampling: not drawn, "
# A check that replays its workloads on the KV variants drew no beam search: one of them has
# a single seat (engines.testing.search.beam_width_cap).
BEAMS_UNFIT = "beams: none fit every variant"
BEAMS_REFUSED = "beams: not drawn with, "  # + a field some engine refuses on beams
# Said once per engine where nothing could be counted: no threshold declared, or a KV pool
# that the requests running at once cannot overflow (so the engine never preempts).
NO_THRESHOLDS = "limits: no position thresholds declared"
POOL_FITS = "limits: the pool holds every request running at once"  # its blocks
POOL_SEATS = "limits: requests the engine runs at once"
NEAR_MISS = "near-miss prompts"
# Sampled requests drawn by no check but the one that judges seeded sampling: the engine
# declares that check broken (its tally says so).
GREEDY_ONLY = "sampling: every request greedy"
_TOPIC = re.compile(r"^(max )?\w+: ")
_DEFAULT = SamplingParams()


@dataclass(slots=True)
class Coverage:
    counts: Counter[str] = field(default_factory=Counter)
    most: Counter[str] = field(default_factory=Counter)  # maxima, not sums

    def record(self, trace: Trace, limits: EngineLimits) -> None:
        c, w = self.counts, trace.workload
        c["workloads"] += 1
        c["requests"] += len(w.requests)
        c["aborts"] += len(w.aborts)
        c["bad requests"] += len(w.bad)
        block = limits.block
        for j, r in enumerate(w.requests):
            if any(is_near_miss(r.prompt_token_ids, q.prompt_token_ids, block)
                   for q in w.requests[:j]):
                c[NEAR_MISS] += 1
            p, toks = r.params, trace.tokens(r.request_id)
            if p.temperature > 0:
                c["seeded" if p.seed is not None else "unseeded"] += 1
            if r.lora is not None:
                c["under a LoRA adapter"] += 1
            if r.cache_salt is not None:
                c["with a cache salt"] += 1
            for name in DRAWN_FIELDS:
                if getattr(p, name) != getattr(_DEFAULT, name):
                    c[f"with {name}"] += 1
            if len(r.prompt_token_ids) + p.max_tokens == limits.max_model_len:
                c["at the whole context"] += 1
            if limits.kv and len(r.prompt_token_ids) + len(toks) > 2 * limits.block:
                c["across 2+ KV blocks"] += 1
            n, total = len(r.prompt_token_ids), len(r.prompt_token_ids) + len(toks)
            for name, at in limits.thresholds:
                if total > at:
                    c[f"past the {name} ({at})"] += 1
                    if n <= at:
                        c[f"across the {name} ({at}) while decoding"] += 1
            _composed(c, trace, r)
            reason = trace.finish_reason(r.request_id)
            if reason == FinishReason.STOP:
                c["stopped" + (" at the last budgeted token"
                               if len(toks) == p.max_tokens else "")] += 1
            self.most["longest prompt"] = max(self.most["longest prompt"],
                                              len(r.prompt_token_ids))
        self.most["in flight at once"] = max(self.most["in flight at once"], _in_flight(trace))
        if not limits.thresholds:
            self.most[NO_THRESHOLDS] = 1
        if limits.pool_overflows is False and limits.kv_blocks is not None:
            self.most[POOL_FITS] = limits.kv_blocks
            self.most[POOL_SEATS] = limits.slots
        if not limits.sampling:
            self.most[GREEDY_ONLY] = 1
        for name in sorted(DRAWN_FIELDS - limits.sampling_fields):  # said, not silently skipped
            self.most[f"{UNDRAWN}{name}"] = 1
        if "beam_width" in limits.sampling_fields:  # said, not silently skipped
            for name in sorted(limits.refused_with_beams & limits.sampling_fields):
                self.most[f"{BEAMS_REFUSED}{name}"] = 1
        for name, n in trace.exercised.items():  # the engine's own counters (Exercised)
            c[f"{ENGINE}{name.replace('_', ' ')}"] += n

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
    def describe(data: Mapping[str, int]) -> str:
        """One line: the counts (zeros left out), then the engine's own counters."""
        ours = [f"{v} {k}" if not k.startswith("max ") else f"{k[4:]} {v}"
                for k, v in data.items() if v and not noted(k)]
        engines = [f"{v} {k.removeprefix(ENGINE)}" for k, v in data.items()
                   if k.startswith(ENGINE)]
        return ", ".join(ours) + (f"; the engine counted {', '.join(engines)}"
                                  if engines else "")

    @staticmethod
    def notes(data: Mapping[str, int]) -> list[str]:
        """The sentences about every workload's reach: the sampling fields not drawn, and why;
        the position thresholds and KV pools nothing could cross. Each check's own follow
        (its Tally's notes)."""
        out = []
        undrawn = sorted(k.removeprefix(f"max {UNDRAWN}") for k in data
                         if k.startswith(f"max {UNDRAWN}"))
        if undrawn:
            out.append("sampling: not drawn, as not every engine compared declares it in "
                       f"supported_sampling: {', '.join(undrawn)}")
        if data.get(f"max {NO_THRESHOLDS}"):
            out.append("limits: the engine declares no position thresholds (a sliding window, "
                       "a RoPE scaling threshold: `position_thresholds`), nor does an engine "
                       "compared with it, so no request was drawn to cross one and none was "
                       "counted")
        refused = sorted(k.removeprefix(f"max {BEAMS_REFUSED}") for k in data
                         if k.startswith(f"max {BEAMS_REFUSED}"))
        if refused:
            out.append("beams: drawn without " + ", ".join(refused) + ", as an engine "
                       "compared refuses them on a beam search (Capabilities."
                       "refused_with_beams); each is drawn without beams")
        if data.get(f"max {BEAMS_UNFIT}"):
            out.append("beams: the KV check, which replays every workload on each config "
                       "variant with a KV view, drew no beam search, as one of them has one "
                       "seat (a search needs one a beam); the beam check draws them on the "
                       "engine alone")
        if data.get(f"max {POOL_FITS}"):
            out.append(f"limits: the KV pool's {data[f'max {POOL_FITS}']} blocks "
                       "(kv_total_blocks) hold a whole context for each of the "
                       f"{data.get(f'max {POOL_SEATS}', 0)} requests the engine runs at once, "
                       "so no workload overflows it and none was drawn to make it preempt; "
                       "preemption is reached on an engine or --engine-variant with a "
                       "smaller pool (kv_accounting judges a variant's KV view too)")
        return out


def noted(key: str) -> bool:
    """Whether a summary key is material for a note (`topic: detail`), not for the line."""
    return _TOPIC.match(key) is not None


def _no_notes(data: Mapping[str, int], check: str) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Tally:
    """What a check adds to the coverage summary, kept beside its property: `add` puts what
    the property returned on a passing workload into the summary; `notes` turns the check's
    `topic: detail` keys of the summary (all checks of an engine merged) into sentences. Both
    are given the check's name, so that neither writes it."""

    add: Callable[[Coverage, Any, str], None]  # (summary, what the property returned, name)
    notes: Callable[[Mapping[str, int], str], list[str]] = _no_notes  # (summary, name)


def _composed(c: Counter[str], trace: Trace, r: Request) -> None:
    """Counts of features drawn together (engines.testing.composition), so that a passing run
    says composition ran: families with stop strings, aborted after a child finished, and
    aborts that flushed text the stream held back (a stop string's start, a cut character)."""
    p, outs = r.params, [o for _, o in trace.outputs.get(r.request_id, [])]
    if isinstance(p.n, int) and p.n > 1 and p.beam_width <= 1:
        if p.stop:
            c["families with stop strings"] += 1
        if r.request_id in trace.aborted_at and any(
                o.finished and o.finish_reason != FinishReason.ABORT for o in outs):
            c["families aborted after a child finished"] += 1
    if any(o.finish_reason == FinishReason.ABORT and o.text for o in outs):
        c["aborted while text was held back"] += 1
    # Drawn together on the mix's requests already: a tenant's request with a constraint;
    # prompt logprobs over a prefix-cache hit (where the engine reports its hits).
    if r.lora is not None and any(getattr(p, f) != getattr(_DEFAULT, f)
                                  for f in CONSTRAINT_PARAMS):
        c["under a LoRA adapter with constraints"] += 1
    if p.prompt_logprobs and any(o.cached_prompt_tokens for o in outs):
        c["with prompt logprobs over a prefix-cache hit"] += 1


def _in_flight(trace: Trace) -> int:
    w = trace.workload
    most = 0
    for k in range(len(trace.steps)):
        live = sum(1 for r, s in zip(w.requests, w.arrivals, strict=True)
                   if s <= k and trace.finished_at.get(r.request_id, k) >= k)
        most = max(most, live)
    return most
