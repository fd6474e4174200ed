"""Tenant isolation from the engine's own per-request count of prompt tokens it took from its
prefix cache (StepOutput.cached_prompt_tokens, for engines that declare it in
`output_fields`): the flavour for engines the suite cannot look inside (a server over HTTP:
vLLM's usage.prompt_tokens_details.cached_tokens, llama-server's timings.cache_n).

No sharing across tenants (a tenant: the adapter's directory, or its name where none is
declared, and the cache salt). A cache can only hand a request KV that was computed for a
token sequence its prompt starts with, so a request that took c cached tokens shares a
prefix of at least c tokens with a sequence its engine had computed for its own tenant. Which
sequences those are is known only for a salted request: the recorder sends each run's salts
tagged with the run (engines.testing.recorder), so the engine computed nothing under that salt
but this run's requests. Its own tenant's sequences are reckoned generously (any request of
the run of that tenant that arrived before it, or before its first output; each one's prompt
and delivered tokens, and where those are all a prefix of this prompt, the whole prompt, for
tokens computed but never delivered: aborts, stop strings cut short, drafts); another
tenant's strictly (its prompt and the tokens delivered before this request was added, less
the last one, once its first output was seen). A salted request whose count exceeds what its
tenant can explain while another tenant's computed sequence shares a prefix that long was
handed that tenant's KV. Unsalted requests (the base tenant, an adapter without a salt) are
not judged: the engine (a server running since before this process) may hold their tenant's
KV from any earlier request. Children and beams (a request's own siblings may hit its
prefill) are not judged either.

A hit is demanded of a same-tenant repeat B of an earlier request A (the same prompt, both
without prompt_logprobs, neither with children or beams) added after A's first output and
before A's finishing output arrived (so A's prompt KV was computed and, unless the engine
finished A in the meantime, held). Even then an engine that does not prefix-cache (or not
while A runs) takes nothing, and a block-granular cache takes nothing from a prompt shorter
than a block and a token, so the demand is made only where the base tenant's own repeat under
the same condition in the same run took c0 > 0 tokens (the control: the engine caches), and
only of repeats whose prompt, less its last token, is at least c0 long.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.judging.base import describe
from engines.testing.recorder import Trace

__all__ = ["CountsJudged", "check_counts", "reported_counts"]

BASE = (None, None)


@dataclass(frozen=True, slots=True)
class CountsJudged:
    reported: int  # requests whose count the engine reported
    unreported: int  # requests with outputs but no count (aborted ones aside)
    salted_hits: int  # salted requests with a hit, judged for no sharing
    salted: int  # salted requests judged (hit or not)
    unsalted_hits: int  # unsalted requests with a hit: not judged (earlier KV of their tenant)
    cross_candidates: int  # salted requests another tenant's computed prompt could have fed
    unexplained: int  # salted hits no computed sequence of the run explains (not judged)
    repeats: int  # same-tenant repeats judged for a hit (a control hit in the run)
    unjudged_repeats: int  # eligible repeats not judged: no control hit in the run
    controls: int  # control repeats that hit


def _tenant(trace: Trace, r: Request) -> tuple[str | None, str | None]:
    return trace.lora_paths.get(r.request_id, r.lora), r.cache_salt


def _who(r: Request) -> str:
    return f"{r.request_id!r} (adapter {r.lora!r}, cache_salt {r.cache_salt!r})"


def reported_counts(trace: Trace) -> dict[Hashable, int]:
    """Each request's reported cached prompt tokens (the first report; once by contract)."""
    out: dict[Hashable, int] = {}
    for rid, outs in trace.outputs.items():
        for _, o in outs:
            if o.cached_prompt_tokens is not None:
                out[rid] = int(o.cached_prompt_tokens)
                break
    return out


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _forks(r: Request) -> bool:
    return r.params.n != 1 or r.params.beam_width != 1


def _children(trace: Trace, rid: Hashable, before: int | None = None) -> list[list[int]]:
    """Each child's delivered tokens (at steps before `before`, where given)."""
    out: dict[int, list[int]] = {}
    for step, o in trace.outputs.get(rid, []):
        if before is None or step < before:
            out.setdefault(o.index, []).extend(o.token_ids)
    return list(out.values()) or [[]]


def _first_token_step(trace: Trace, rid: Hashable) -> int | None:
    return next((step for step, o in trace.outputs.get(rid, []) if o.token_ids), None)


def _own_reach(trace: Trace, q: Request, prompt: Sequence[int]) -> int:
    """How long a prefix of `prompt` the KV q's engine computed may cover, generously."""
    best = 0
    for tokens in _children(trace, q.request_id):
        seq = (*q.prompt_token_ids, *tokens)
        n = _common(prompt, seq)
        # All of it a prefix of prompt: q may have computed tokens it never delivered.
        best = max(best, len(prompt) if n == len(seq) else n)
    return best


def _sure_reach(trace: Trace, y: Request, prompt: Sequence[int], added: int) -> int:
    """How long a prefix of `prompt` y's KV surely covered when the request was added at
    step `added`: y's prompt and tokens delivered before then, less the last (its KV is
    computed with the next one), once y's first token was seen."""
    first = _first_token_step(trace, y.request_id)
    if first is None or first >= added:
        return 0
    best = 0
    for tokens in _children(trace, y.request_id, before=added):
        best = max(best, _common(prompt, (*y.prompt_token_ids, *tokens[:-1])))
    return best


def _no_sharing(check: Check, trace: Trace, counts: dict[Hashable, int]
                ) -> tuple[int, int, int, int, int]:
    w = trace.workload
    arrival = {r.request_id: s for r, s in zip(w.requests, w.arrivals, strict=True)}
    salted = salted_hits = unsalted_hits = candidates = unexplained = 0
    for r in w.requests:
        c = counts.get(r.request_id)
        if c is None or _forks(r):
            continue
        if r.cache_salt is None:
            unsalted_hits += c > 0
            continue
        salted += 1
        prompt, me = r.prompt_token_ids, _tenant(trace, r)
        added = arrival[r.request_id]
        first = _first_token_step(trace, r.request_id)
        # Its own tenant's requests that may have been computed before its prefill: added
        # no later than it, or before its first token came (the engine may have admitted
        # them first).
        own = max((_own_reach(trace, q, prompt) for q in w.requests
                   if q is not r and _tenant(trace, q) == me
                   and (arrival[q.request_id] <= added
                        or first is None or arrival[q.request_id] < first)), default=0)
        others = [(y, _sure_reach(trace, y, prompt, added)) for y in w.requests
                  if y is not r and _tenant(trace, y) != me]
        feeder = max(others, key=lambda p: p[1], default=None)
        if feeder is not None and feeder[1] > own:
            candidates += 1
        if c <= 0:
            continue
        salted_hits += 1
        if c <= own:
            continue
        if feeder is None or feeder[1] < c:
            unexplained += 1
            continue
        y, reach = feeder
        raise check.fail(
            f"{describe(r, trace)}, {_who(r)}, took {c} prompt tokens from the prefix cache "
            f"(the engine's own count), but its own tenant's requests computed at most a "
            f"{own}-token prefix of its prompt (the run's cache salts are its own: nothing "
            "under this one was computed before the run), so that KV was computed for "
            f"another tenant; {describe(y, trace)}, {_who(y)}, for one, had computed a "
            f"{reach}-token prefix of it before it was added: KV cached for one tenant was "
            "handed to another.")
    return salted, salted_hits, unsalted_hits, candidates, unexplained


def _repeats(trace: Trace, counts: dict[Hashable, int]) -> list[tuple[Request, int]]:
    """Each same-tenant repeat that could have hit (module docstring) and its count."""
    w = trace.workload
    arrival = {r.request_id: s for r, s in zip(w.requests, w.arrivals, strict=True)}
    out = []
    for i, b in enumerate(w.requests):
        c = counts.get(b.request_id)
        if c is None or b.params.prompt_logprobs or _forks(b):
            continue
        added = arrival[b.request_id]
        for a in w.requests[:i]:
            first = _first_token_step(trace, a.request_id)
            done = trace.finished_at.get(a.request_id)
            if (a.prompt_token_ids == b.prompt_token_ids and not a.params.prompt_logprobs
                    and not _forks(a) and _tenant(trace, a) == _tenant(trace, b)
                    and first is not None and first < added
                    and done is not None and done > added
                    and a.request_id not in trace.aborted_at):
                out.append((b, c))
                break
    return out


def check_counts(check: Check, trace: Trace) -> CountsJudged:
    """No salted request took more cached tokens than its own tenant's computed sequences
    explain where another tenant's would; and where the base tenant's repeat of a running
    request's prompt hit, every other tenant's repeat under the same condition hits
    (module docstring)."""
    __tracebackhide__ = True
    counts = reported_counts(trace)
    # An aborted request may never have been admitted: nothing to count.
    unreported = sum(1 for r in trace.workload.requests
                     if trace.outputs.get(r.request_id) and r.request_id not in counts
                     and r.request_id not in trace.aborted_at)
    salted, salted_hits, unsalted_hits, candidates, unexplained = _no_sharing(
        check, trace, counts)
    repeats = _repeats(trace, counts)
    hits = [c for r, c in repeats if _tenant(trace, r) == BASE and c > 0]
    others = [(r, c) for r, c in repeats if _tenant(trace, r) != BASE]
    least = min(hits, default=0)
    demanded = [(r, c) for r, c in others if len(r.prompt_token_ids) - 1 >= least]
    if hits:
        for r, c in demanded:
            if c == 0:
                raise check.fail(
                    f"{describe(r, trace)}, {_who(r)}, repeats the prompt of an earlier "
                    "request of its own tenant, added after that one's first token and before "
                    "its last, and took no prompt token from the prefix cache (the engine's "
                    "own count); the base tenant's repeat under the same condition in this "
                    f"run took {least}. The engine caches, but not for this tenant: "
                    "isolation by caching nothing.")
    judged = len(demanded) if hits else 0
    return CountsJudged(reported=len(counts), unreported=unreported, salted=salted,
                        salted_hits=salted_hits, unsalted_hits=unsalted_hits,
                        cross_candidates=candidates, unexplained=unexplained,
                        repeats=judged, unjudged_repeats=len(others) - judged,
                        controls=len(hits))
