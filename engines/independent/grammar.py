"""Guided decoding straight from llguidance: its LLMatcher over its own LLTokenizer (built by
llguidance.hf from transformers' tokenizer of our tokenizer.json), its token bitmask masking
the logits, as a transformers LogitsProcessor and StoppingCriteria pair.

What is ours here is only the protocol's mapping of a Guided spec to llguidance's grammar
sources: a regex and a Lark grammar (GBNF through llguidance's gbnf_to_lark) as they are, a
choice as a Lark alternation of its strings as literals, and a JSON schema with compact
whitespace (the protocol's engines generate compact JSON: a tiny model would otherwise pad
with spaces until its budget ends; a schema's own x-guidance options still win).
"""

from __future__ import annotations

import json
from typing import Any

import torch
from transformers.generation import LogitsProcessor, StoppingCriteria

from engines.protocol import Guided, InvalidRequest

__all__ = ["Grammar", "compile_grammar"]


def _source(guided: Guided) -> str:
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import gbnf_to_lark

    spec = guided.spec
    if guided.kind == "choice":
        literals = " | ".join(json.dumps(choice, ensure_ascii=False) for choice in spec)
        return str(LLMatcher.grammar_from_lark(f"start: {literals}"))
    assert isinstance(spec, str)
    if guided.kind == "regex":
        return str(LLMatcher.grammar_from_regex(spec))
    if guided.kind == "json_schema":
        return str(LLMatcher.grammar_from_json_schema(
            spec, defaults={"whitespace_flexible": False}))
    return str(LLMatcher.grammar_from_lark(gbnf_to_lark(spec)))


class Grammar(LogitsProcessor):
    """One request's grammar as a processor: masks what the grammar refuses next (its
    GrammarStop consumes each generated token)."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.stopped = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor
                 ) -> torch.FloatTensor:
        # The matcher's bitmask (bit t of byte t // 8), unpacked here: llguidance.torch's
        # helpers torch.compile kernels when imported (~5 s on a CPU, ~25 s on first use).
        bits = torch.frombuffer(bytearray(self.matcher.compute_bitmask()), dtype=torch.uint8)
        allowed = ((bits[:, None] >> torch.arange(8, dtype=torch.uint8)) & 1).flatten()
        keep = allowed[: scores.shape[-1]].bool().to(scores.device)
        return scores.masked_fill(~keep, float("-inf"))  # type: ignore[return-value]


class GrammarStop(StoppingCriteria):
    """The grammar's criterion: consumes the token just generated; True once it is done."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        m = self.grammar.matcher
        m.consume_token(int(input_ids[0, -1]))
        self.grammar.stopped = bool(m.is_stopped())
        return torch.tensor([self.grammar.stopped])  # type: ignore[return-value]


def compile_grammar(guided: Guided, tokenizer: Any, vocab_size: int) -> Grammar:
    """A fresh Grammar for `guided` over llguidance's `tokenizer`; InvalidRequest naming
    guided.spec where it does not compile."""
    from llguidance import LLMatcher

    try:
        source = _source(guided)
    except ValueError as exc:
        raise InvalidRequest(f"guided.spec: {guided.spec!r} is not a valid {guided.kind}: "
                             f"{exc}") from None
    matcher = LLMatcher(tokenizer, source, log_level=0)
    if matcher.is_error():
        raise InvalidRequest(f"guided.spec: {guided.spec!r} is not a valid {guided.kind}: "
                             f"{matcher.get_error()}")
    return Grammar(matcher, vocab_size)
