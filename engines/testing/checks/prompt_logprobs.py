"""prompt_logprobs: a request asking for them gets, on its first output, one entry per prompt
position (None at position 0; else the prompt token's logprob and the k most likely ids'),
equal to the reference engine's (a plain teacher-forced forward of the model) and to the
request's served alone, whatever the engine had cached or chunked. A prefix cache serves KV,
not logits: an engine that fills the entries of cached positions from somewhere else hands
back values of another prompt or another time (vLLM PR #42245: stale, order-dependent values
under prefix caching; vLLM #8268: an assertion once a cached prefix passed a block).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from engines.protocol import Request
from engines.testing.checks.base import Check
from engines.testing.checks.logprobs import LOGPROBS, _apart, at_depth, said, tolerances
from engines.testing.checks.needs import PROMPT_LOGPROBS
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.prompt_logprobs import FEATURE as PROMPT_LOGPROBS_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.oracle import served_by
from engines.testing.recorder import Trace

Entries = Sequence[Mapping[int, float] | None]


def _shape(check: Check, trace: Trace, r: Request, got: Entries) -> None:
    __tracebackhide__ = True
    prompt, k = r.prompt_token_ids, r.params.prompt_logprobs
    if len(got) != len(prompt):
        raise check.fail(f"{describe(r, trace)} asked for {k} prompt logprobs and got "
                         f"{len(got)} entries for its {len(prompt)} prompt positions.")
    if got[0] is not None:
        raise check.fail(f"{describe(r, trace)} got a prompt-logprobs entry at position 0 "
                         f"({dict(got[0])}); nothing predicts the first token: expected None.")
    for i in range(1, len(prompt)):
        entry = got[i]
        if entry is None or prompt[i] not in entry:
            raise check.fail(f"{describe(r, trace)} got prompt-logprobs entry {i} without its "
                             f"prompt token {prompt[i]}: {entry!r}.")
        top = min(k, trace.vocab_size or k)
        if not top <= len(entry) <= k + 1:
            raise check.fail(f"{describe(r, trace)} got {len(entry)} candidates at prompt "
                             f"position {i}; expected the {k} most likely, plus the prompt "
                             "token where it is not among them.")
        bad = [t for t, v in entry.items() if v > 1e-6 or (trace.vocab_size
                                                           and not 0 <= t < trace.vocab_size)]
        if bad:
            raise check.fail(f"{describe(r, trace)} got prompt-logprobs entry {i} with ids or "
                             f"values no log-distribution over the vocabulary has: {entry!r}.")


def _compare(check: Check, trace: Trace, r: Request, got: Entries, expected: Entries,
             tol: float, rel: float, what: str, judge: Judge) -> None:
    __tracebackhide__ = True
    for i in range(1, min(len(got), len(expected))):
        mine, theirs = got[i], expected[i]
        if mine is None or theirs is None:
            continue
        here = at_depth(tol, judge, i)
        where = _apart(mine, theirs, here, r.params.prompt_logprobs, rel)
        if where is not None:
            raise check.fail(f"{describe(r, trace)} got prompt logprobs at position {i} "
                             f"that differ from {what}: {where} ({said(here, rel)}; "
                             f"prefix-cache hit tokens in this run: "
                             f"{trace.exercised.get('prefix_cache_hit_tokens', 'not counted')}).")


def _add(coverage: Coverage, judged: tuple[int, int], check: str) -> None:
    coverage.counts["with prompt logprobs judged"] += judged[0]
    coverage.counts["with prompt logprobs judged within the tie-aware tolerance"] += judged[1]


TALLY = Tally(_add)


def check_prompt_logprobs(check: Check, trace: Trace, judge: Judge) -> tuple[int, int]:
    """Every request that asked for prompt logprobs and got a token: its first output (only)
    carries them, well formed, and equal to the request's served alone (within BATCH_TOL) and
    to the reference engine's (within REFERENCE_TOL); under tie-aware parity within the
    values' tolerances (engines.testing.checks.logprobs.tolerances).
    Prompt logprobs depend on the prompt alone, so sampled and unseeded requests are judged
    too."""
    __tracebackhide__ = True
    (batch_tol, rel), (reference_tol, reference_rel) = tolerances(judge)
    judged = tied = 0
    for r in trace.workload.requests:
        if not r.params.prompt_logprobs:
            continue
        outs = [o for _, o in trace.outputs.get(r.request_id, [])]
        if not any(o.token_ids for o in outs):
            continue  # aborted before its first token: nothing was promised
        carried = [i for i, o in enumerate(outs) if o.prompt_logprobs is not None]
        if carried != [0]:
            raise check.fail(f"{describe(r, trace)} asked for prompt logprobs; expected them "
                             f"on its first output only, got them on outputs {carried} of "
                             f"{len(outs)}.")
        got = outs[0].prompt_logprobs
        assert got is not None
        _shape(check, trace, r, got)
        judged, tied = (judged + 1, tied) if judge.parity == "exact" else (judged, tied + 1)
        path = trace.lora_paths.get(r.request_id)
        alone = judge.oracle(r.prompt_token_ids, r.params, lora_path=path)
        if alone.prompt_logprobs is not None:
            _compare(check, trace, r, got, alone.prompt_logprobs, batch_tol, rel,
                     "the same request's, served alone", judge)
        if judge.reference is not None:
            ref = served_by(judge.reference, r.prompt_token_ids, r.params, path)
            if ref is not None and ref.prompt_logprobs is not None:
                _compare(check, trace, r, got, ref.prompt_logprobs, reference_tol, reference_rel,
                         "the reference engine's", judge.versus_reference())
    return judged, tied


CHECK = Check("prompt_logprobs", check_prompt_logprobs, needs=(PROMPT_LOGPROBS,),
              draws=(PROMPT_LOGPROBS_FEATURE.use(LOGPROBS),), tally=TALLY)
