"""Guided decoding (engines.protocol.Guided) as OpenVINO GenAI's StructuredOutputConfig (its
xgrammar backend): a regex, a JSON schema and a grammar (GBNF, which xgrammar's EBNF reads)
map one to one; a choice list becomes a regex alternation of its escaped literals.

How the library ends a guided request differs from the protocol's rule (a full match that
can go no further stops there, finish STOP): its grammar accepts the tokenizer's EOS (the
presets' BPE's <|endoftext|>, its last id) where the text may end, and FORCES it where the
text can go no further, so such a request ends with one more token, the EOS, finishing STOP
(vLLM's xgrammar backend does the same). Under `ignore_eos` (the adapter's setting for a
request without stop ids) the library does not stop at that EOS and the request runs on
unconstrained after it, so a guided request always runs with its EOS on. Its JSON schemas
allow free whitespace (xgrammar's default, which the StructuredOutputConfig cannot turn
off), where the protocol's reference (engines.core.guided) writes compact JSON.

Stop ids: the library lets its grammar end on ANY of a request's stop ids, allowed by the
grammar or not (a choice ("yes", "no") with stop id 0, token "!", gives "no!"), where the
protocol masks every token the grammar does not allow, stop ids too. So a guided request is
given the EOS as its only stop id, and the adapter ends it at the first of its own stop ids the
library emits (`guided_stop`), after min_tokens, cancelling the library's request there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import openvino_genai

from engines.protocol import Guided, SamplingParams

__all__ = ["GUIDED_ENDS", "guided_stop", "structured_output"]

GUIDED_ENDS = ("openvino-genai ends a guided request whose text can go no further with one "
               "more token, the EOS its grammar forces (the protocol: STOP at the full match), "
               "and lets JSON carry whitespace (the reference writes compact JSON): guided "
               "requests' tokens differ from the reference's (engines.adapters.openvino.guided)")


def structured_output(guided: Guided) -> Any:
    config = openvino_genai.StructuredOutputConfig()
    spec = guided.spec
    if guided.kind == "choice":
        config.regex = "(" + "|".join(re.escape(c) for c in spec) + ")"
    elif guided.kind == "regex":
        config.regex = str(spec)
    elif guided.kind == "json_schema":
        config.json_schema = str(spec)
    else:
        config.grammar = str(spec)
    return config


def guided_stop(p: SamplingParams, before: int, new: Sequence[int]) -> int | None:
    """For a guided request with stop ids: how many of the `new` tokens (after `before`
    earlier ones) to keep, through the first stop id past min_tokens; None: all of them."""
    if p.guided is None or not p.stop_token_ids:
        return None
    for i, token in enumerate(new):
        if token in p.stop_token_ids and before + i + 1 > p.min_tokens:
            return i + 1
    return None
