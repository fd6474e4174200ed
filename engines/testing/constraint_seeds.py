"""Hand-picked constrained workloads, run with the other seed workloads (engines.testing.
seed_workloads) before any search, for engines that declare constraints: deterministic, so
that the bug classes of constrained decoding under batching are met every run, not by luck.

- constraints joining and leaving mid-batch: more requests than the engine runs at once, the
  early ones constrained and short (their slots freed, rows compacted over them, slots reused
  by unconstrained requests), guided and unguided rows side by side;
- a bias beside a repetition penalty on greedy rows (the penalty divides the biased logit:
  a bias added anywhere else in the order of steps changes what a greedy row chooses, which
  a reference engine can judge);
- guided requests past the KV pool, for an engine whose pool the requests it runs at once
  can overflow: preempted while decoding, their grammars must resume where they were.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from engines.protocol import CONSTRAINT_PARAMS, Guided, Request, SamplingParams
from engines.testing.limits import EngineLimits
from engines.testing.strategies import AloneFn, pseudo_tokens
from engines.testing.workload import Workload

__all__ = ["LONG_REGEX", "constraint_workloads"]

# Builds request i: (i, prompt, max_tokens, **params) -> Request.
Make = Callable[..., Request]

# A grammar that a second pass over its own tokens leaves (the leading "x" comes once), with
# long outputs (as long as its unguided neighbours', so that they overflow the pool together):
# what a preempted request must resume without replaying.
LONG_REGEX = "x[a-e]{100,200}y"


def constraint_workloads(limits: EngineLimits, alone: AloneFn | None) -> list[Workload]:
    """The constrained seed workloads this engine's declarations allow (none where it
    declares no constraint)."""
    declared = CONSTRAINT_PARAMS & limits.sampling_fields
    if not declared:
        return []
    lp = limits.logprobs
    guided = "guided" in declared and limits.tokenizer is not None

    def req(i: int, prompt: Sequence[int], max_tokens: int, **kw: object) -> Request:
        budget = max(1, min(max_tokens, limits.max_model_len - 1))
        params = SamplingParams(max_tokens=budget, logprobs=lp,
                                prompt_logprobs=limits.prompt_logprobs,
                                **kw)  # type: ignore[arg-type]
        return Request(tuple(prompt)[: limits.max_model_len - budget], params,
                       request_id=f"r{i}")

    out = [_mid_batch(limits, req, declared, guided)]
    if "logit_bias" in declared and "repetition_penalty" in limits.sampling_fields:
        out.append(_bias_beside_penalty(limits, req, alone))
    if guided and limits.kv_blocks is not None:
        found = _guided_past_the_pool(limits, req)
        if found is not None:
            out.append(found)
    return out


def _mid_batch(limits: EngineLimits, req: Make, declared: frozenset[str],
               guided: bool) -> Workload:
    """Short constrained requests first (their slots freed and rows compacted over while
    longer neighbours run), unconstrained and guided ones beside them, late ones reusing the
    freed slots."""
    v = limits.vocab_size
    kinds: list[dict[str, object]] = []
    if "allowed_token_ids" in declared:
        kinds.append({"allowed_token_ids": (5, 9, 77 % v, 300 % v)})
    if guided:
        kinds.append({"guided": Guided("choice", ("yes", "no", "maybe"))})
    if "bad_words" in declared:
        kinds.append({"bad_words": ((3 % v,), (12 % v, 12 % v))})
    if "logit_bias" in declared:
        kinds.append({"logit_bias": ((12 % v, 100.0),)})
    if guided:
        kinds.append({"guided": Guided("regex", "[a-c]{2,5}")})
        kinds.append({"guided": Guided("json_schema", json.dumps(
            {"type": "object", "properties": {"ok": {"type": "boolean"}},
             "required": ["ok"], "additionalProperties": False}))})
    n = max(limits.slots + 2, 2 * len(kinds))
    reqs, arrivals = [], []
    for i in range(n):
        prompt = [(11 * i + j) % v for j in range(2 + i % 4)]
        if i % 2 == 0 and kinds:  # constrained and short, then unconstrained and longer
            reqs.append(req(i, prompt, 1 + i % 3, **kinds[(i // 2) % len(kinds)]))
        else:
            reqs.append(req(i, prompt, 6 + i % 5))
        arrivals.append(0 if i < limits.slots else 1 + (i - limits.slots))
    return Workload(tuple(reqs), tuple(arrivals),
                    label="constraints joining and leaving mid-batch")


def _bias_beside_penalty(limits: EngineLimits, req: Make, alone: AloneFn | None
                         ) -> Workload:
    """Greedy rows under a repetition penalty with small biases on their prompt's tokens and
    on the tokens they generate, beside an unpenalized biased row."""
    v = limits.vocab_size
    reqs = []
    for i, (penalty, bias) in enumerate(((2.0, 3.0), (1.3, -1.5), (2.0, -1.5), (0.7, 3.0))):
        prompt = pseudo_tokens(40 + i, 6, v)
        own: Sequence[int] = ()
        if alone is not None:
            own = alone(prompt, SamplingParams(max_tokens=6, repetition_penalty=penalty))
        ids = list(dict.fromkeys([*prompt[-2:], *own[:2]]))
        reqs.append(req(i, prompt, 6, repetition_penalty=penalty,
                         logit_bias=tuple((t, bias) for t in ids)))
    reqs.append(req(len(reqs), pseudo_tokens(50, 4, v), 6,
                     logit_bias=((pseudo_tokens(50, 4, v)[0], 3.0),)))
    return Workload(tuple(reqs), tuple(i // 2 for i in range(len(reqs))),
                    label="logit bias beside a repetition penalty")


def _guided_past_the_pool(limits: EngineLimits, req: Make) -> Workload | None:
    """Requests (as many as run at once, 16 at most, none more than the pool's blocks) whose
    prompts fill the pool to one token short of a block boundary each, every other one guided
    by LONG_REGEX: their outputs need one more block each, so the engine preempts while they
    decode, and guided requests resume. None where the requests the engine runs at once
    cannot overflow its pool, or a context cannot hold such a request."""
    assert limits.kv_blocks is not None
    if not limits.pool_overflows:
        return None
    n = max(1, min(limits.slots, 16, limits.kv_blocks))
    prompt = limits.kv_blocks // n * limits.block - 1
    budget = limits.block
    if prompt + budget > limits.max_model_len:
        return None
    reqs = [req(i, pseudo_tokens(500 + i, prompt, limits.vocab_size), budget,
                **({"guided": Guided("regex", LONG_REGEX)} if i % 2 else {}))
            for i in range(n)]
    return Workload(tuple(reqs), (0,) * n, label="guided requests past the KV pool")
