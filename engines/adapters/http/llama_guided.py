"""Guided decoding (engines.protocol.Guided) as llama-server's `grammar` and `json_schema`.

llama-server takes a GBNF grammar (`grammar`) or a JSON schema (`json_schema`, which it turns
into GBNF itself) on `POST /completion`; it has no regex or choice field. So:

- "grammar": the GBNF as it is (the protocol's grammars are GBNF, root rule `root`);
- "json_schema": the schema as a JSON object (llama.cpp's converter allows free whitespace
  between JSON tokens, where the protocol's reference writes compact JSON);
- "choice": a GBNF alternation of the literals;
- "regex": translated to GBNF here (`regex_to_gbnf`), for the regex subset whose GBNF form is
  the same construct: literals, character classes (ranges, negation), `.`,
  groups (capturing or `(?:`), alternation, and the quantifiers ? * + {m} {m,} {m,n}, greedy;
  a leading ^ and a trailing $ are dropped (the protocol's regex is a whole match anyway).
  Anything else (lookarounds, backreferences, lazy quantifiers, anchors inside, and the
  classes \\d \\w \\s, which are Unicode-aware in Python's and Rust's regexes and would be
  ASCII here) is refused with a ValueError naming it, which the adapter reports as the
  request's error.

How llama.cpp ends a guided request: its grammar allows the vocabulary's end-of-generation
tokens (the presets' BPE `<|endoftext|>`, its last id, in the BPE GGUF) exactly where the text
may end and forces one where it can go no further; the server then stops (`stop_type`
"eos") with that token as the request's last. Under `ignore_eos` it bans those tokens instead
(a logit bias of -inf), and a grammar that can go no further then has no token left: the
server fails the request ("Unexpected empty grammar stack"). So a guided request is sent with
`ignore_eos` off, every other request with it on, as in the plain dialect.
"""

from __future__ import annotations

import json
from typing import Any

from engines.protocol import Guided

__all__ = ["guided_fields", "regex_to_gbnf"]

_CLASSES = frozenset("dDwWsS")  # Unicode-aware in the regex dialects: refused
_QUANT = "?*+"


def _char(c: str) -> str:
    """One character as GBNF writes it inside a string literal or a class: ASCII letters and
    digits as themselves, other ASCII by its code (no escaping rules to get wrong), the rest
    as its UTF-8 (which GBNF reads as such; llguidance's GBNF reader misreads \\U escapes)."""
    if c.isascii() and not c.isalnum():
        return f"\\x{ord(c):02X}"
    return c


def _escape(c: str) -> str:
    """The literal a regex escape `\\c` stands for (outside a class)."""
    return {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}.get(c, c)


def _class(regex: str, i: int) -> tuple[str, int]:
    """The character class starting at regex[i] == '[' as GBNF, and the index after it."""
    out = ["["]
    i += 1
    if i < len(regex) and regex[i] == "^":
        out.append("^")
        i += 1
    first = True
    while i < len(regex) and (regex[i] != "]" or first):
        c = regex[i]
        first = False
        if c == "\\" and i + 1 < len(regex):
            e = regex[i + 1]
            if e in _CLASSES or e.isdigit():
                raise ValueError(f"regex {regex!r}: \\{e} has no exact GBNF form")
            out.append(_char(_escape(e)))
            i += 2
        elif c == "-" and len(out) > 1 and i + 1 < len(regex) and regex[i + 1] != "]":
            out.append("-")
            i += 1
        else:
            out.append(_char(c))
            i += 1
    if i >= len(regex):
        raise ValueError(f"regex {regex!r}: an unclosed character class")
    out.append("]")
    return "".join(out), i + 1


def regex_to_gbnf(regex: str) -> str:
    """A GBNF grammar (rule `root`) for the whole-match language of `regex`, in the subset the
    module docstring lists; ValueError on anything outside it."""
    body = regex[1:] if regex.startswith("^") else regex
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "(":
            if body.startswith("(?:", i):
                i += 3
            elif body.startswith("(?", i):
                raise ValueError(f"regex {regex!r}: {body[i:i + 3]!r} has no GBNF form")
            else:
                i += 1
            out.append("(")
            depth += 1
            continue
        if c == ")":
            if depth == 0:
                raise ValueError(f"regex {regex!r}: an unbalanced ')'")
            depth -= 1
            out.append(")")
        elif c == "|":
            out.append("|")
        elif c == "[":
            cls, i = _class(body, i)
            out.append(cls)
            continue
        elif c in _QUANT or c == "{":
            if not out or out[-1] in ("(", "|"):
                raise ValueError(f"regex {regex!r}: a quantifier with nothing before it")
            if c == "{":
                end = body.find("}", i)
                inner = body[i + 1:end] if end > 0 else ""
                if not inner or not all(p.strip().isdigit() or (k == 1 and p == "")
                                        for k, p in enumerate(inner.split(","))) \
                        or inner.count(",") > 1:
                    raise ValueError(f"regex {regex!r}: a bad repetition at {i}")
                out[-1] += "{" + inner + "}"
                i = end + 1
            else:
                out[-1] += c
                i += 1
            if i < len(body) and body[i] in "?+":
                raise ValueError(f"regex {regex!r}: lazy or possessive quantifiers have no "
                                 "GBNF form")
            continue
        elif c == ".":
            out.append("[^\\n]")
        elif c == "\\":
            if i + 1 >= len(body):
                raise ValueError(f"regex {regex!r}: a trailing backslash")
            e = body[i + 1]
            if e in _CLASSES or e.isdigit() or e in "bBAzZ":
                raise ValueError(f"regex {regex!r}: \\{e} has no GBNF form")
            else:
                out.append('"' + _char(_escape(e)) + '"')
            i += 2
            continue
        elif c in "^$":
            raise ValueError(f"regex {regex!r}: an anchor inside the pattern has no GBNF form")
        else:
            out.append('"' + _char(c) + '"')
        i += 1
    if depth:
        raise ValueError(f"regex {regex!r}: an unclosed group")
    # An empty alternative (`a|`, `()`) is GBNF's empty sequence, which it reads as such.
    return "root ::= " + (" ".join(out) or '""')


def _literal(text: str) -> str:
    return '"' + "".join(_char(c) for c in text) + '"'


def guided_fields(guided: Guided) -> dict[str, Any]:
    """The /completion fields for `guided` (ValueError where it cannot be said)."""
    spec = guided.spec
    if guided.kind == "choice":
        return {"grammar": "root ::= " + " | ".join(_literal(c) for c in spec)}
    assert isinstance(spec, str)
    if guided.kind == "json_schema":
        return {"json_schema": json.loads(spec)}
    if guided.kind == "regex":
        return {"grammar": regex_to_gbnf(spec)}
    return {"grammar": spec}
