"""Constraints for drawn requests (engines.protocol's CONSTRAINT_PARAMS), for engines that
declare them: `request_mixes` hands each ordinary request to `constrained`, so that parity,
reference_parity and variants judge constrained requests beside unconstrained ones (a
neighbour's mask on the wrong row is the class's commonest failure), and the `constraints`
check judges what each constraint promises.

What is drawn, one family of masks per request at most (two masks together can leave no
token at all, and what an engine samples then means nothing): allowed ids (a small set, of
the tokens the request would generate unconstrained and others), bad words (short sequences
of those tokens: words the request would complete), or a grammar the tiny random models can
satisfy (choice lists, bounded regexes, one-property JSON schemas with enums and bounded
fields, a small GBNF grammar); and, beside any of them, a logit bias on a few ids, at
+-100 (forced, banned in all but name) and at small values (which move sampled rows only as
the protocol's order of steps says; a repetition penalty is drawn beside most biases, as
it divides the biased logit). A grammar is drawn only for an engine that declares a
`tokenizer` (text gives it its meaning).

Everything shrinks toward no constraint at all.

The hand-picked constrained workloads (`constraint_workloads`), run with the other seed
workloads before any search, for engines that declare constraints: deterministic, so that the
bug classes of constrained decoding under batching are met every run, not by luck.

- constraints joining and leaving mid-batch: more requests than the engine runs at once, the
  early ones constrained and short (their slots freed, rows compacted over them, slots reused
  by unconstrained requests), guided and unguided rows side by side;
- a bias beside a repetition penalty on greedy rows (the penalty divides the biased logit:
  a bias added anywhere else in the order of steps changes what a greedy row chooses, which
  a reference engine can judge);
- guided requests past the KV pool, for an engine whose pool the requests it runs at once
  can overflow: preempted while decoding, their grammars must resume where they were;
- each mask's hard case, from the request's own greedy continuation served alone (`_hard_cases`):
  bad words of two and three tokens it would otherwise complete (a word's earlier tokens
  compared one position off lets it through), and allowed ids that leave out the token it
  would choose first (a mask not applied, or applied to another row, lets it through).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from hypothesis import strategies as st

from engines.protocol import (
    CONSTRAINT_PARAMS,
    GUIDED_KINDS,
    Guided,
    GuidedKind,
    Request,
    SamplingParams,
)
from engines.testing.features.base import AloneFn, Drawing, Feature, Make, pseudo_tokens
from engines.testing.limits import EngineLimits
from engines.testing.workload import Workload

__all__ = ["CHOICES", "DENSE", "FEATURE", "GRAMMARS", "HARD_CASES", "JSON_SCHEMAS", "LONG_REGEX",
           "UNDER_ADAPTERS",
           "REGEXES",
           "constrained", "constraint_workloads", "guided_specs",
           "satisfiable"]


# Choice lists: words the presets' tokenizer has whole, multi-byte ones, and choices that
# are prefixes of one another (the grammar may end or go on).
CHOICES: tuple[tuple[str, ...], ...] = (
    ("yes", "no", "maybe"),
    ("red", "green", "blue"),
    ("a", "ab", "abc"),
    ("café", "niño"),
    ("你好", "世界"),
    ("🚀", "✨"),
)
# Bounded regexes in the syntax every regex dialect reads alike.
REGEXES: tuple[str, ...] = ("[a-c]{1,4}", "(yes|no)", "[0-9]{2,3}", "x[0-9]?y", "(ka|to){1,3}")
# One property at most: the order of an object's keys is then no engine's choice.
JSON_SCHEMAS: tuple[str, ...] = tuple(json.dumps(s) for s in (
    {"type": "boolean"},
    {"enum": ["red", "green", "blue"]},
    {"type": "integer", "minimum": 0, "maximum": 99},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
     "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "blue"]}},
     "required": ["color"], "additionalProperties": False},
))
GRAMMARS: tuple[str, ...] = ('root ::= "a" | "b" root',
                             'root ::= ("ka" | "to") ("," ("ka" | "to"))?')
# Bias values: small ones, either sign, about the tiny models' gaps between their top
# candidates; forced and banned in all but name (+-100); large but not forcing.
BIASES: tuple[float, ...] = (3.0, -1.5, 100.0, -100.0, 8.0, -8.0)
# Repetition penalties beside a bias (1.0: none, what shrinking turns to).
PENALTIES: tuple[float, ...] = (1.0, 1.3, 2.0, 0.7)
# Requests in three that get a constraint: in ordinary draws, and in the `constraints`
# check's (limits.constraints_dense), which still leaves unconstrained neighbours.
SHARE, DENSE_SHARE = 1, 2


def guided_specs(kinds: Sequence[GuidedKind] = GUIDED_KINDS) -> st.SearchStrategy[Guided]:
    """A Guided constraint of one of `kinds` from the fixed families above."""
    pools: dict[GuidedKind, Sequence[str | tuple[str, ...]]] = {
        "choice": CHOICES, "regex": REGEXES, "json_schema": JSON_SCHEMAS, "grammar": GRAMMARS}
    return st.sampled_from([k for k in pools if k in kinds]).flatmap(
        lambda kind: st.sampled_from(list(pools[kind])).map(lambda spec: Guided(kind, spec)))


def _kinds(limits: EngineLimits) -> list[str]:
    """The families of masks this engine (and every engine compared) declares; a grammar only
    where the engine says which tokenizer gives text its meaning."""
    declared = CONSTRAINT_PARAMS & limits.sampling_fields
    out: list[str] = [f for f in ("allowed_token_ids", "bad_words") if f in declared]
    if "guided" in declared and limits.tokenizer is not None:
        out.append("guided")
    return out


@st.composite
def _ids(draw: st.DrawFn, limits: EngineLimits, own: Sequence[int], label: str,
         most: int) -> list[int]:
    """1..most distinct ids, three in four from the request's own unconstrained tokens (where
    a mask or a bias changes what it generates), the rest from anywhere."""
    mine = sorted({t for t in own if 0 <= t < limits.vocab_size})
    pick = st.integers(0, limits.vocab_size - 1)
    if mine:
        pick = st.one_of(*[st.sampled_from(mine)] * 3, pick)
    return draw(st.lists(pick, min_size=1, max_size=most, unique=True), label=label)


@st.composite
def _words(draw: st.DrawFn, limits: EngineLimits, own: Sequence[int]) -> tuple[tuple[int, ...],
                                                                                ...]:
    """1..3 short sequences: pieces of the tokens the request would generate (words it would
    complete), or arbitrary ones."""
    words = []
    for j in range(draw(st.integers(1, 3), label="bad_word_count")):
        from_own = draw(st.booleans(), label=f"bad_word{j}_from_own")
        if own and from_own:
            at = draw(st.integers(0, len(own) - 1), label=f"bad_word{j}_at")
            size = draw(st.integers(1, 3), label=f"bad_word{j}_len")
            word = tuple(own[at:at + size])
        else:
            word = tuple(draw(st.lists(st.integers(0, limits.vocab_size - 1), min_size=1,
                                       max_size=3), label=f"bad_word{j}"))
        if word and all(0 <= t < limits.vocab_size for t in word):
            words.append(word)
    return tuple(dict.fromkeys(words))


@st.composite
def constrained(draw: st.DrawFn, limits: Drawing, prompt: Sequence[int],
                params: SamplingParams, alone: AloneFn | None) -> SamplingParams:
    """`params` with constraints, for one request in three (two in the `constraints` check's
    draws), where the engines compared declare them; else `params` unchanged."""
    kinds = _kinds(limits)
    bias = "logit_bias" in limits.sampling_fields
    if not kinds and not bias:
        return params
    share = DENSE_SHARE if limits.constraints_dense else SHARE
    if draw(st.integers(0, 2), label="constrained") < 3 - share:
        return params
    # What the request would generate without constraints (greedily, if its draws are not
    # reproducible): the ids worth allowing, banning and biasing.
    own: Sequence[int] = ()
    if alone is not None:
        unseeded = params.temperature > 0 and params.seed is None
        own = alone(prompt, SamplingParams(max_tokens=params.max_tokens) if unseeded
                    else params)
    change: dict[str, object] = {}
    family = draw(st.sampled_from(["none", *kinds]), label="constraint")
    if family == "allowed_token_ids":
        change[family] = tuple(draw(_ids(limits, own, "allowed_ids", 5)))
    elif family == "bad_words":
        change[family] = draw(_words(limits, own), label="bad_words")
    elif family == "guided":
        change[family] = draw(guided_specs(), label="guided")
        # Room for a grammar to finish: JSON takes a dozen tokens on the tiny vocabulary.
        room = limits.max_model_len - len(prompt)
        budget = min(room, max(params.max_tokens,
                               draw(st.integers(1, 16), label="guided_budget")))
        change["max_tokens"] = budget
        # No min_tokens: stop ids held back could be all the grammar allows at some point,
        # and what an engine samples from nothing means nothing.
        change["min_tokens"] = 0
    # A sampled row always gets a bias beside its mask: where a bias goes among temperature,
    # penalties and filters shows only there.
    if bias and (family == "none" or params.temperature > 0
                 or draw(st.booleans(), label="also_bias")):
        # Its own tokens and its prompt's: a penalty acts on both, and so on their bias.
        ids = draw(_ids(limits, (*own, *prompt[-8:]), "biased_ids", 3))
        change["logit_bias"] = tuple((t, draw(st.sampled_from(BIASES), label="bias"))
                                     for t in ids)
        if "repetition_penalty" in limits.sampling_fields and params.repetition_penalty == 1.0:
            # A penalty divides the biased logit (the protocol's order of steps): a bias
            # added after it is wrong on greedy rows too, which a reference can judge.
            change["repetition_penalty"] = draw(st.sampled_from(PENALTIES),
                                                label="bias_with_penalty")
    return dataclasses.replace(params, **change)  # type: ignore[arg-type]


def satisfiable(params: SamplingParams) -> SamplingParams:
    """`params` once its stop ids are drawn, without a min_tokens that would hold back every
    allowed id (all of them stop ids): no token could be sampled then, and a correct engine
    may emit anything."""
    allowed = params.allowed_token_ids
    if (allowed is not None and params.min_tokens
            and set(allowed) <= set(params.stop_token_ids)):
        return dataclasses.replace(params, min_tokens=0)
    return params


# A grammar that a second pass over its own tokens leaves (the leading "x" comes once), with
# long outputs (as long as its unguided neighbours', so that they overflow the pool together):
# what a preempted request must resume without replaying.
LONG_REGEX = "x[a-e]{100,200}y"


def constraint_workloads(limits: Drawing, alone: AloneFn | None) -> list[Workload]:
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
    if alone is not None and {"bad_words", "allowed_token_ids"} & declared:
        out.append(_hard_cases(limits, req, declared, alone))
    if "logit_bias" in declared and "repetition_penalty" in limits.sampling_fields:
        out.append(_bias_beside_penalty(limits, req, alone))
    if guided and limits.kv_blocks is not None:
        found = _guided_past_the_pool(limits, req)
        if found is not None:
            out.append(found)
    # Only in the constraints check's seed workloads (the one whose draws are dense): the
    # checks that draw tenants meet adapters and constraints together in their draws.
    if limits.loras and limits.constraints_dense and "allowed_token_ids" in declared:
        out.append(_under_adapters(limits, req))
    return out


UNDER_ADAPTERS = "constraints under each LoRA adapter"


def _under_adapters(limits: EngineLimits, req: Make) -> Workload:
    """Per adapter the engine serves (two at most) and the base model, arriving together:
    two prompts under a small allowed-ids set (the mask, not the adapter, decides every
    token: a row whose mask is skipped for its adapter's sake leaves the set)."""
    v = limits.vocab_size
    allowed = tuple(dict.fromkeys((5 % v, 9 % v, 77 % v, 300 % v)))
    reqs: list[Request] = []
    for lora in (None, *limits.loras[:2]):
        for prompt in ((3, 1, 4), (8, 6)):
            r = req(len(reqs), prompt, 6, allowed_token_ids=allowed)
            reqs.append(dataclasses.replace(r, lora=lora))
    return Workload(tuple(reqs), (0,) * len(reqs), label=UNDER_ADAPTERS)


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


# The hard cases' label, and their prompts and how many tokens of each one's greedy
# continuation are read.
HARD_CASES = "bad words the request would complete, allowed ids without its greedy token"
_HARD_PROMPTS = ((3, 1, 4, 1), (5, 9, 2), (6, 5, 3, 5), (8, 9, 7))
_HARD_BUDGET = 8


def _hard_cases(limits: EngineLimits, req: Make, declared: frozenset[str],
                alone: AloneFn) -> Workload:
    """Per prompt, its greedy continuation `own` served alone, then the same prompt under
    bad words of 2 and 3 tokens of `own` (own[1:3], own[2:5]: the request would complete
    them, and must not) and under allowed ids without own[0] (what it would choose first),
    beside an unconstrained neighbour, arriving together."""
    v = limits.vocab_size
    budget = max(1, min(_HARD_BUDGET, limits.max_model_len // 2))
    reqs: list[Request] = []
    for raw in _HARD_PROMPTS:
        prompt = tuple(t % v for t in raw)
        own = list(alone(prompt, SamplingParams(max_tokens=budget)))
        if "bad_words" in declared:
            words = tuple(dict.fromkeys(w for w in (tuple(own[1:3]), tuple(own[2:5]))
                                        if len(w) >= 2))
            if words:
                reqs.append(req(len(reqs), prompt, budget, bad_words=words))
        if "allowed_token_ids" in declared and own:
            others = tuple(t for t in (own[1:4] if len(own) > 1 else ()) if t != own[0])
            allowed = tuple(dict.fromkeys((*others, (own[0] + 1) % v, (own[0] + 7) % v)))
            reqs.append(req(len(reqs), prompt, budget, allowed_token_ids=allowed))
        reqs.append(req(len(reqs), prompt[::-1], budget))
    return Workload(tuple(reqs), tuple(i // 4 for i in range(len(reqs))), label=HARD_CASES)


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


# The setting of the `constraints` check: constraints on two drawn requests in three.
DENSE = 2


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return constraint_workloads(drawing, alone)


FEATURE = Feature("constraints", needs="allowed_token_ids, logit_bias, bad_words or guided in "
                  "supported_sampling (of the engine and of every engine it is compared with)",
                  declared=lambda limits: bool(CONSTRAINT_PARAMS & limits.sampling_fields),
                  everywhere=True,
                  configure=lambda limits, setting: {"constraints_dense": setting == DENSE},
                  params=constrained, seeds=_seeds)
