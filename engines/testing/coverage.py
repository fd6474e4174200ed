"""What a check exercised, so that "passed" says how much: requests and their kinds, how many
were in flight at once, the edges reached (the whole context, stop tokens at the last
budgeted token, outputs across KV blocks), aborts, bad input, and what was not judged and why.
A counter is kept only for what the engine has: no KV-block count for an engine without
KVIntrospection (the strategies still cross 16-token "blocks", but they are a guess there).
No counter is about slots: occupancy is read from the trace ("in flight at once")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from engines.protocol import ALL_PARAMS, BASE_PARAMS, FinishReason, SamplingParams
from engines.testing.limits import TIE_AWARE_WITHHELD, EngineLimits
from engines.testing.oracle import TOP_K
from engines.testing.properties.seeds import FALSE_ALARM, MOST_SEEDS_ASKED, SOURCES, SeedGroup
from engines.testing.recorder import Trace
from engines.testing.strategies import is_near_miss

__all__ = ["Coverage"]

ENGINE = "engine: "  # the engine's own counters: reported even at zero, which says a lot
# Seed groups the `seeds` check could not judge, by reason; with the figures that say what
# would make them judgeable. Kept apart from the counts and written out as sentences.
SEEDS = "seeds: "
JUDGED = "seed groups judged"
NO_LOGPROBS = f"{SEEDS}no top_logprobs from the %s"
TOO_FEW = f"{SEEDS}too few seeds for the %s's first-token distribution"
CERTAIN = f"{SEEDS}a first token all but certain under the %s"
MOST_SEEDS = f"{SEEDS}distinct seeds in a group not judged"
NEEDED = f"{SEEDS}distinct seeds a group needs"
TOP_PERCENT = f"{SEEDS}top first-token candidate, percent"
BOUND = f"{FALSE_ALARM:g}".replace("e-0", "e-")  # as the check's docstring writes it: 1e-6
# The logits-processing fields of SamplingParams: requests drawn with each are counted, and
# those not drawn (an engine compared does not declare them) are named in a note.
PROCESSED = ALL_PARAMS - BASE_PARAMS
UNDRAWN = "sampling not drawn: "
# Said once per engine where nothing could be counted: no threshold declared, or a KV pool
# that the requests running at once cannot overflow (so the engine never preempts).
NO_THRESHOLDS = "limits: no position thresholds declared"
POOL_FITS = "limits: the pool holds every request running at once"  # its blocks
POOL_SEATS = "limits: requests the engine runs at once"
NEAR_MISS = "near-miss prompts"
WITHHELD = "sampling not drawn under tie-aware parity: "
# Sampled requests drawn by no check but `seeds`: the engine declares seeded sampling broken.
GREEDY_ONLY = "sampling: every request greedy"
# bad_input's re-checks of the good requests left to the engine's declared xfail, by check.
NOT_RECHECKED = "bad_input: not re-checked, declared broken: "
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
            for name in PROCESSED:
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
        for name in sorted(PROCESSED - limits.sampling_fields):  # said, not silently skipped
            prefix = WITHHELD if limits.sampling_withheld else UNDRAWN
            self.most[f"{prefix}{name}"] = 1
        for name, n in trace.exercised.items():  # the engine's own counters (Exercised)
            c[f"{ENGINE}{name.replace('_', ' ')}"] += n

    def record_seed_groups(self, groups: list[SeedGroup]) -> None:
        """The fates `check_seeds` gave its seed groups: judged, or why not (the figures that
        would change it kept as maxima)."""
        keys = {"no logprobs": NO_LOGPROBS, "too few seeds": TOO_FEW, "certain": CERTAIN}
        for group in groups:
            if group.fate == "judged":
                self.counts[JUDGED] += 1
                continue
            self.counts[keys[group.fate] % group.source] += 1
            if group.fate == "too few seeds":
                for key, value in ((MOST_SEEDS, group.size), (NEEDED, group.needed),
                                   (TOP_PERCENT, group.top_percent)):
                    self.most[key] = max(self.most[key], value or 0)

    def record_unrechecked(self, left: tuple[str, ...]) -> None:
        """bad_input's re-checks of the good requests left to their own declared xfail."""
        for name in left:
            self.most[f"{NOT_RECHECKED}{name}"] = 1

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
        """One line: the counts (zeros left out), then the engine's own counters."""
        unjudged = sum(v for k, v in data.items() if _reason(k) is not None)
        ours = []
        for k, v in data.items():
            if _reason(k) is not None and unjudged:  # their total, where the first one was
                ours.append(f"{unjudged} seed group{'s' * (unjudged != 1)} not judged "
                            "(why: below)")
                unjudged = 0
            if v and not k.startswith(ENGINE) and not k.removeprefix("max ").startswith(
                    (SEEDS, UNDRAWN, WITHHELD, GREEDY_ONLY, NOT_RECHECKED, "limits: ")):
                ours.append(f"{v} {k}" if not k.startswith("max ") else f"{k[4:]} {v}")
        engines = [f"{v} {k.removeprefix(ENGINE)}" for k, v in data.items()
                   if k.startswith(ENGINE)]
        return ", ".join(ours) + (f"; the engine counted {', '.join(engines)}"
                                  if engines else "")

    @staticmethod
    def notes(data: dict[str, int]) -> list[str]:
        """The sampling fields not drawn, and why; per reason seed groups went unjudged: what
        it was, and what would change it."""
        out = []
        for prefix, because in ((UNDRAWN, "as not every engine compared declares it in "
                                          "supported_sampling"),
                                (WITHHELD, f"as {TIE_AWARE_WITHHELD}")):
            undrawn = sorted(k.removeprefix(f"max {prefix}") for k in data
                             if k.startswith(f"max {prefix}"))
            if undrawn:
                out.append(f"sampling: not drawn, {because}: {', '.join(undrawn)}")
        if data.get(f"max {GREEDY_ONLY}"):
            out.append("sampling: no check but `seeds` drew a sampled request (temperature > 0): "
                       "the engine declares `seeds` broken (expected_failed_checks), so every "
                       "other check judged greedy requests only")
        left = sorted(k.removeprefix(f"max {NOT_RECHECKED}") for k in data
                      if k.startswith(f"max {NOT_RECHECKED}"))
        if left:
            out.append(f"bad_input: the good requests beside refused ones were not re-checked "
                       f"for {', '.join(left)}, which the engine declares broken (its own "
                       "strict xfail judges it); the refusals and what they left behind were")
        if data.get(f"max {NO_THRESHOLDS}"):
            out.append("limits: the engine declares no position thresholds (a sliding window, "
                       "a RoPE scaling threshold: `position_thresholds`), nor does an engine "
                       "compared with it, so no request was drawn to cross one and none was "
                       "counted")
        if data.get(f"max {POOL_FITS}"):
            out.append(f"limits: the KV pool's {data[f'max {POOL_FITS}']} blocks "
                       "(kv_total_blocks) hold a whole context for each of the "
                       f"{data.get(f'max {POOL_SEATS}', 0)} requests the engine runs at once, "
                       "so no workload overflows it and none was drawn to make it preempt; "
                       "preemption is reached on an engine or --engine-variant with a "
                       "smaller pool (kv_accounting judges a variant's KV view too)")
        for key, n in data.items():
            found = _reason(key)
            if n and found is not None:
                why, source = found
                out.append(f"seeds: {n} seed group{'s' * (n != 1)} not judged: "
                           + why(data, source))
        return out


Why = Callable[[dict[str, int], str], str]


def _reason(key: str) -> tuple[Why, str] | None:
    """The sentence for a not-judged key, and whose logprobs it was about."""
    for template, why in ((NO_LOGPROBS, _no_logprobs), (TOO_FEW, _too_few),
                          (CERTAIN, _certain)):
        for source in SOURCES:
            if key == template % source:
                return why, source
    return None


def _no_logprobs(data: dict[str, int], source: str) -> str:
    fix = ("return top_logprobs (one {token id: logprob} mapping per generated token, its "
           "top params.logprobs candidates) when params.logprobs > 0"
           + (", or pass --reference-engine with an engine that does" if source == "engine"
              else ""))
    return (f"the {source} returned no top_logprobs for the group's prompt served alone "
            f"(greedy, max_tokens=1, logprobs={TOP_K}), so the chance that a correct engine "
            f"samples all-identical outputs could not be bounded (the check judges a group "
            f"only below {BOUND}). To have such groups judged, {fix}.")


def _too_few(data: dict[str, int], source: str) -> str:
    return (f"too few seeds for the {source}'s first-token distribution: its top_logprobs "
            f"put up to {data.get('max ' + TOP_PERCENT, 0)}% on one candidate, so with the "
            f"{data.get('max ' + MOST_SEEDS, 0)} or fewer distinct seeds these groups had at "
            f"temperature 1 a correct engine samples all-identical outputs with a chance of "
            f"{BOUND} or more. Groups of {data.get('max ' + NEEDED, 0)} or more "
            f"distinct seeds of one of these prompts would be judged; if the top_logprobs are "
            f"not the distribution the {source} samples from at temperature 1, they should be.")


def _certain(data: dict[str, int], source: str) -> str:
    return (f"the {source}'s top_logprobs make one first token all but certain, so not even "
            f"{MOST_SEEDS_ASKED:,} distinct seeds would bring the chance of all-identical "
            f"samples below {BOUND}. A prompt whose first token is less certain would "
            f"be judged; if the top_logprobs are not the distribution the {source} samples "
            f"from at temperature 1, they should be.")


def _in_flight(trace: Trace) -> int:
    w = trace.workload
    most = 0
    for k in range(len(trace.steps)):
        live = sum(1 for r, s in zip(w.requests, w.arrivals, strict=True)
                   if s <= k and trace.finished_at.get(r.request_id, k) >= k)
        most = max(most, live)
    return most
