"""The protocol's guided decoding as onnxruntime-genai's guidance (`TurnOptions.set_guidance(
kind, spec)`, kinds "regex", "json_schema" and "lark_grammar"), which compiles its grammars
with llguidance, as the reference engine does (engines.core.guided): each kind is passed as
the reference compiles it, so both mask the same tokens.

- regex: as it is (llguidance's regex syntax on both sides).
- choice: the Lark alternation of JSON-quoted literals the reference builds.
- json_schema: with llguidance's `x-guidance` option `whitespace_flexible: false` (the
  reference's default: compact JSON) unless the schema sets it itself.
- grammar (GBNF): llguidance's own GBNF-to-Lark translation, as "lark_grammar".
"""

from __future__ import annotations

import json

from engines.protocol import Guided, InvalidRequest

__all__ = ["guidance"]


def guidance(guided: Guided) -> tuple[str, str]:
    """The (kind, spec) onnxruntime-genai's set_guidance takes for a Guided constraint."""
    spec = guided.spec
    if guided.kind == "choice":
        return "lark_grammar", "start: " + " | ".join(json.dumps(c, ensure_ascii=False)
                                                       for c in spec)
    assert isinstance(spec, str)
    if guided.kind == "regex":
        return "regex", spec
    if guided.kind == "json_schema":
        try:
            schema = json.loads(spec)
        except ValueError as exc:
            raise InvalidRequest(f"guided.spec: {spec!r} is not a JSON schema: {exc}") from None
        if isinstance(schema, dict):
            options = schema.get("x-guidance")
            options = dict(options) if isinstance(options, dict) else {}
            options.setdefault("whitespace_flexible", False)
            schema = {**schema, "x-guidance": options}
        return "json_schema", json.dumps(schema)
    from llguidance.gbnf_to_lark import gbnf_to_lark

    return "lark_grammar", gbnf_to_lark(spec)
