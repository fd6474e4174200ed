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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from engines.protocol import CONSTRAINT_PARAMS, GUIDED_KINDS, Guided, GuidedKind, SamplingParams
from engines.testing.limits import EngineLimits

__all__ = ["CHOICES", "GRAMMARS", "JSON_SCHEMAS", "REGEXES", "constrained", "guided_specs",
           "satisfiable"]

# Serves (prompt, params) alone and returns the generated token ids (AloneOracle.tokens).
Alone = Callable[[Sequence[int], SamplingParams], Sequence[int]]

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
def constrained(draw: st.DrawFn, limits: EngineLimits, prompt: Sequence[int],
                params: SamplingParams, alone: Alone | None) -> SamplingParams:
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
