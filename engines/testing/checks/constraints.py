"""constraints: the constraints of engines.protocol's CONSTRAINT_PARAMS are kept in every output,
judged from the request and the tokens alone: no emitted id outside `allowed_token_ids`; no
`bad_words` sequence completed; every guided output accepted by its grammar, in full where the
grammar ended it (finish STOP, not on a stop id or a stop string), as a prefix where its
budget, an abort or a stop string did.

Grammars are judged with llguidance over the engine's declared tokenizer (the directory
holding tokenizer.json, Capabilities.tokenizer), built here from the request's spec and
nothing of the engine's: a JSON schema with free whitespace (a superset of what any engine's
grammar allows; the drawn schemas have one property at most, so the order of keys is no
engine's choice), a choice list as an alternation of literals, regexes and GBNF as they are.
An output that ends on the tokenizer's special token (an EOS) ends the text there.

What a logit bias does is judged by parity with the reference engine, not here (it needs the
logits): reference_parity and parity run over the same constrained draws.

A position where the constraints together leave no token at all (min_tokens holding back the
only allowed ids, which are also stop ids; a bad word whose end is the only allowed id) lets
a correct engine emit anything: the request is not judged from there on, and the summary
counts it.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.protocol import FinishReason, Guided, Request
from engines.testing.checks.base import Check
from engines.testing.checks.needs import CONSTRAINTS
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.constraints import DENSE
from engines.testing.features.constraints import FEATURE as CONSTRAINTS_FEATURE
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["CHECK", "TALLY", "Judged", "check_constraints", "completed_word", "grammar_of"]

# The constraints the notes name when none was drawn, and why a request went unjudged.
KINDS = ("allowed_token_ids", "logit_bias", "bad_words", "guided")
NO_TOKEN = "no token allowed at some position"
NO_TOKENIZER = "guided, but the engine declares no tokenizer"


@dataclass(slots=True)
class Judged:
    """What one workload's judgement covered: guided requests by kind and by how they ended,
    and the requests not judged, by reason."""

    requests: Counter[str] = field(default_factory=Counter)
    unjudged: Counter[str] = field(default_factory=Counter)


def grammar_of(guided: Guided) -> str:
    """The llguidance grammar that judges a Guided constraint's output."""
    from llguidance import LLMatcher

    spec = guided.spec
    if guided.kind == "choice":
        return str(LLMatcher.grammar_from_lark(
            "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in spec)))
    assert isinstance(spec, str)
    if guided.kind == "regex":
        return str(LLMatcher.grammar_from_regex(spec))
    if guided.kind == "json_schema":
        return str(LLMatcher.grammar_from_json_schema(spec))  # whitespace free
    from llguidance.gbnf_to_lark import gbnf_to_lark

    return str(LLMatcher.grammar_from_lark(gbnf_to_lark(spec)))


@functools.lru_cache(maxsize=4)
def _tokenizer(directory: str, vocab_size: int) -> tuple[Any, frozenset[int]]:
    """llguidance's view of the declared tokenizer, and its special tokens' ids."""
    from llguidance import LLTokenizer

    root = Path(directory)
    text = (root / "tokenizer.json").read_text()
    specials = {t["content"]: int(t["id"]) for t in json.loads(text).get("added_tokens", [])
                if t.get("special")}
    eos_name: object = None
    config = root / "tokenizer_config.json"
    if config.is_file():
        eos_name = json.loads(config.read_text()).get("eos_token")
        if isinstance(eos_name, dict):  # an AddedToken's fields
            eos_name = eos_name.get("content")
    eos = specials.get(str(eos_name), specials.get("<|endoftext|>"))
    return (LLTokenizer(text, n_vocab=vocab_size, eos_token=eos),
            frozenset(specials.values()))


def completed_word(words: Sequence[Sequence[int]], tokens: Sequence[int], i: int
                   ) -> tuple[int, ...] | None:
    """The bad word that tokens[i] completes, if any."""
    for word in words:
        k = len(word)
        if k and i + 1 >= k and tuple(tokens[i + 1 - k:i + 1]) == tuple(word):
            return tuple(word)
    return None


def _bans(words: Sequence[Sequence[int]], before: Sequence[int]) -> set[int]:
    """The ids whose emission next would complete a bad word."""
    n = len(before)
    return {w[-1] for w in words if w and len(w) - 1 <= n
            and tuple(before[n - len(w) + 1:]) == tuple(w[:-1])}


class _Grammar:
    """One request's grammar, judged token by token."""

    def __init__(self, trace: Trace, guided: Guided) -> None:
        from llguidance import LLMatcher

        assert trace.tokenizer is not None
        self.tok, self.specials = _tokenizer(trace.tokenizer, trace.vocab_size)
        self.source = grammar_of(guided)
        self.m = LLMatcher(self.tok, self.source, log_level=0)
        self._new = LLMatcher

    def allowed_after(self, tokens: Sequence[int]) -> set[int] | None:
        """The ids the grammar allows after `tokens` (None if they already leave it)."""
        m = self._new(self.tok, self.source, log_level=0)
        if not m.consume_tokens(list(tokens)) or m.is_error():
            return None
        bits = bytes(m.compute_bitmask())
        return {t for t in range(min(len(bits) * 8, self.tok.vocab_size))
                if bits[t >> 3] >> (t & 7) & 1}

    def consume(self, token: int) -> bool:
        return bool(self.m.consume_token(token)) and not self.m.is_error()


def _no_token_left(r: Request, tokens: Sequence[int], i: int, vocab: int,
                   grammar: _Grammar | None) -> bool:
    """Whether the request's constraints (and min_tokens' hold on its stop ids) left no id
    at all to sample at position i."""
    p = r.params
    pool: set[int] = set(range(vocab) if p.allowed_token_ids is None else p.allowed_token_ids)
    pool -= _bans(p.bad_words, tokens[:i])
    if i < p.min_tokens:
        pool -= set(p.stop_token_ids)
    if grammar is not None and pool:
        allowed = grammar.allowed_after(tokens[:i])
        pool &= allowed if allowed is not None else pool
    return not pool


def _judge(check: Check, r: Request, trace: Trace, judged: Judged) -> None:
    __tracebackhide__ = True
    p = r.params
    tokens = trace.tokens(r.request_id)
    reason = trace.finish_reason(r.request_id)
    grammar = None
    if p.guided is not None:
        if trace.tokenizer is None:
            judged.unjudged[NO_TOKENIZER] += 1
        else:
            grammar = _Grammar(trace, p.guided)
    ended = False  # the grammar's text ended at a special token (an EOS)
    for i, t in enumerate(tokens):
        problem = None
        if p.allowed_token_ids is not None and t not in p.allowed_token_ids:
            problem = f"emitted {t}, not among its allowed_token_ids {list(p.allowed_token_ids)}"
        word = completed_word(p.bad_words, tokens, i)
        if problem is None and word is not None:
            problem = f"completed its bad word {list(word)}"
        if problem is None and grammar is not None and not grammar.consume(t):
            if (t in grammar.specials and i == len(tokens) - 1
                    and grammar.allowed_after(tokens[:i]) is not None):
                ended = True  # an EOS the judging tokenizer does not call one: text ends
            else:
                problem = (f"emitted {t}, which its {p.guided.kind} {p.guided.spec!r} "  # type: ignore[union-attr]
                           f"does not allow after {list(tokens[:i])}")
        if problem is None:
            continue
        if _no_token_left(r, tokens, i, trace.vocab_size, grammar):
            judged.unjudged[NO_TOKEN] += 1
            return
        raise check.fail(f"{describe(r, trace)} {problem}: token {i} of {tokens}. Expected "
                         "every emitted id to keep the request's constraints.")
    if grammar is None or p.guided is None:
        return
    stopped_by_id = (reason == FinishReason.STOP and bool(tokens)
                     and tokens[-1] in p.stop_token_ids and len(tokens) > p.min_tokens)
    # A stop string may end it mid-grammar: where it did is the stop_strings check's to judge.
    stopped_by_text = reason == FinishReason.STOP and bool(p.stop)
    full = grammar.m.is_accepting() or ended and _accepting(grammar, tokens[:-1])
    if reason == FinishReason.STOP and not stopped_by_id and not stopped_by_text and not full:
        text = grammar.tok.decode_str(list(tokens))
        raise check.fail(f"{describe(r, trace)} finished with STOP after {tokens} ({text!r}), "
                         f"not on a stop id, but that is not a whole match of its "
                         f"{p.guided.kind} {p.guided.spec!r}, only a prefix of one. Expected "
                         "a guided request to stop where its grammar is matched in full.")
    how = "full match" if reason == FinishReason.STOP and full else "prefix"
    judged.requests[f"guided {p.guided.kind}, {how}"] += 1


def _accepting(grammar: _Grammar, tokens: Sequence[int]) -> bool:
    from llguidance import LLMatcher

    m = LLMatcher(grammar.tok, grammar.source, log_level=0)
    return bool(m.consume_tokens(list(tokens))) and bool(m.is_accepting())


def check_constraints(check: Check, trace: Trace, judge: Judge) -> Judged:
    """No emitted id outside a request's allowed_token_ids; no bad word completed; every
    guided output a valid prefix of its grammar's language, and a whole match where the
    grammar ended it. Returns what it judged (TALLY)."""
    __tracebackhide__ = True
    judged = Judged()  # requests per constraint: the coverage summary counts them already
    for r in trace.workload.requests:
        p = r.params
        if p.allowed_token_ids is None and not p.bad_words and p.guided is None:
            continue
        _judge(check, r, trace, judged)
    return judged


# The summary's keys: the line counts requests per constraint (and guided ones by kind and
# ending); `topic: detail` keys carry what the notes say.
_RAN = "workloads judged"


def _add(coverage: Coverage, judged: Judged, name: str) -> None:
    coverage.counts.update(judged.requests)
    coverage.counts[f"{name}: {_RAN}"] += 1
    for why, n in judged.unjudged.items():
        coverage.counts[f"{name}: not judged, {why}"] += n


def _notes(data: Mapping[str, int], name: str) -> list[str]:
    if not data.get(f"{name}: {_RAN}"):
        return []
    out = []
    # "with <field>": every drawn request's constraints, counted by the coverage summary.
    missing = [k for k in KINDS if not data.get(f"with {k}")]
    if missing:
        out.append(f"{name}: no drawn request had {', '.join(missing)} (drawn only where the "
                   "engine and every engine compared declare the field in supported_sampling, "
                   "guided only for an engine that declares a tokenizer)")
    for why in (NO_TOKEN, NO_TOKENIZER):
        n = data.get(f"{name}: not judged, {why}", 0)
        if n:
            out.append(f"{name}: {n} request{'s' * (n != 1)} not judged ({why})")
    return out


TALLY = Tally(_add, _notes)


CHECK = Check("constraints", check_constraints, needs=(CONSTRAINTS,),
              draws=(CONSTRAINTS_FEATURE.use(DENSE),), tally=TALLY)
