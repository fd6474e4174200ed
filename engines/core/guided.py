"""Guided decoding's grammars, from a library nobody here wrote: llguidance (Microsoft's, the
one behind llama.cpp's %llguidance and a vLLM structured-output backend).

Why llguidance: it installs from one self-contained wheel on a CPU (no torch pin, no
compiler; xgrammar also installs, but pulls its own torch, which would move ours), and it
reads all four kinds of `engines.protocol.Guided`: regexes, JSON schemas, Lark grammars (a
choice list is one) and GBNF (its gbnf_to_lark). One matcher per request, advanced only on
that request's own sampled tokens; an engine keeps it beside the request's tokens, so
admission, compaction, chunked prefill, recompute and aborts move it with them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engines.protocol import Guided, InvalidRequest

__all__ = ["Grammars", "Matcher", "grammar_source"]


def grammar_source(guided: Guided) -> str:
    """The llguidance grammar of a Guided constraint (its spec is checked when compiled)."""
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import gbnf_to_lark

    spec = guided.spec
    if guided.kind == "choice":
        # A Lark alternation of JSON-quoted literals: any text, escaped as Lark reads it.
        return str(LLMatcher.grammar_from_lark(
            "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in spec)))
    assert isinstance(spec, str)
    if guided.kind == "regex":
        return str(LLMatcher.grammar_from_regex(spec))
    if guided.kind == "json_schema":
        # Compact JSON (no free whitespace): a tiny model would otherwise pad with spaces
        # until its budget ends. The schema's own x-guidance options still win.
        return str(LLMatcher.grammar_from_json_schema(
            spec, defaults={"whitespace_flexible": False}))
    return str(LLMatcher.grammar_from_lark(gbnf_to_lark(spec)))


class Matcher:
    """One request's grammar state: the tokens it allows next (as llguidance's bitmask,
    bit t of byte t // 8), advanced by each token the request samples."""

    def __init__(self, matcher: Any) -> None:
        self._m = matcher
        self._bits: bytes | None = None

    def allowed_bits(self) -> bytes:
        if self._bits is None:
            self._bits = bytes(self._m.compute_bitmask())
        return self._bits

    def advance(self, token: int) -> bool:
        """Consume a sampled token; True when the grammar is finished (a full match that can
        go no further, or its EOS). A token the grammar refused leaves it in error: it then
        masks nothing more (the `constraints` check judges the text itself)."""
        self._bits = None
        self._m.consume_token(token)
        return bool(self._m.is_stopped())

    @property
    def failed(self) -> bool:
        return bool(self._m.is_error())


class Grammars:
    """Compiles requests' Guided constraints against one tokenizer (built once, on first use)."""

    def __init__(self, tokenizer_dir: str, vocab_size: int) -> None:
        self._dir = tokenizer_dir
        self._vocab = vocab_size
        self._tok: Any = None

    def _tokenizer(self) -> Any:
        if self._tok is None:
            from llguidance import LLTokenizer
            from tokenizers import Tokenizer

            text = (Path(self._dir) / "tokenizer.json").read_text()
            eos = Tokenizer.from_str(text).token_to_id("<|endoftext|>")
            self._tok = LLTokenizer(text, n_vocab=self._vocab,
                                    eos_token=self._vocab - 1 if eos is None else eos)
        return self._tok

    def matcher(self, guided: Guided) -> Matcher:
        """A fresh matcher for `guided`; InvalidRequest naming guided.spec where it does not
        compile."""
        from llguidance import LLMatcher

        try:
            source = grammar_source(guided)
        except ValueError as exc:
            raise InvalidRequest(f"guided.spec: {guided.spec!r} is not a valid "
                                 f"{guided.kind}: {exc}") from None
        m = LLMatcher(self._tokenizer(), source, log_level=0)
        if m.is_error():
            raise InvalidRequest(f"guided.spec: {guided.spec!r} is not a valid {guided.kind}: "
                                 f"{m.get_error()}")
        return Matcher(m)
