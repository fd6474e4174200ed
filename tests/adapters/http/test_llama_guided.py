"""llama-server's guided fields (engines.adapters.http.llama_guided): a regex translated to
GBNF accepts exactly the strings Python's `re` fully matches (llguidance, which reads GBNF,
is the judge of the grammar), choices become an alternation of their literals (multi-byte
ones too), and regexes outside the translated subset are refused by name. No server needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engines.adapters.http.llama_guided import guided_fields, regex_to_gbnf
from engines.protocol import Guided
from engines.testing.features.constraints import CHOICES, REGEXES

pytest.importorskip("llguidance", reason="llguidance (the reference's grammar library) is "
                                          "not installed")

# Regexes beyond the suite's draws: escapes, classes with escapes, '.', groups, negation.
EXTRA = (r"[0-9]{2}-[^a-z]", r"(?:ab|c)+\.", r"a.c", r"[a-z_]{1,2} ?", "é[ñ-ô]+", r'"q"\\',
         "^(x|)y$", "[]a]b")
SAMPLES = ("", "a", "ab", "abc", "abcd", "abcde", "yes", "no", "ye", "12", "123", "1234", "x",
           "xy", "x5y", "x55y", "ka", "kato", "katoka", "katokat", "tototo", "totototo",
           "12-A", "12-a", "ab.", "abcab.", "c.", "a\nc", "abc", "a_ ", "a_", "ññ", "éñô",
           "éõ", '"q"\\', "y", "xy", "]b", "ab", "a-b", "é")


def _accepts(gbnf: str, text: str) -> bool:
    """Whether llguidance's reading of the GBNF grammar accepts `text` whole (a byte-level
    check through the presets' tokenizer: every string encodes)."""
    from llguidance import LLMatcher, LLTokenizer
    from llguidance.gbnf_to_lark import gbnf_to_lark
    from tokenizers import Tokenizer

    from engines.tokenizer import tokenizer_for

    raw = (Path(tokenizer_for("tiny")) / "tokenizer.json").read_text()
    tok = Tokenizer.from_str(raw)
    lt = LLTokenizer(raw, n_vocab=tok.get_vocab_size(), eos_token=tok.get_vocab_size() - 1)
    m = LLMatcher(lt, LLMatcher.grammar_from_lark(gbnf_to_lark(gbnf)), log_level=0)
    assert not m.is_error(), m.get_error()
    for t in tok.encode(text, add_special_tokens=False).ids:
        if not m.consume_token(t):
            return False
    return bool(m.is_accepting())


@pytest.mark.parametrize("regex", REGEXES + EXTRA)
def test_regex_translation_accepts_what_re_matches(regex: str) -> None:
    gbnf = regex_to_gbnf(regex)
    pattern = re.compile(regex)
    matched = 0
    for text in SAMPLES:
        want = pattern.fullmatch(text) is not None
        matched += want
        assert _accepts(gbnf, text) == want, (regex, gbnf, text, want)
    assert matched, f"no sample matches {regex!r}: the test would judge only refusals"


@pytest.mark.parametrize("choices", CHOICES)
def test_choice_is_an_alternation_of_its_literals(choices: tuple[str, ...]) -> None:
    (gbnf,) = guided_fields(Guided("choice", choices)).values()
    for c in choices:
        assert _accepts(gbnf, c)
        assert not _accepts(gbnf, c + "z")
    assert not _accepts(gbnf, "")


def test_json_schema_is_sent_as_an_object() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    assert guided_fields(Guided("json_schema", json.dumps(schema))) == {"json_schema": schema}
    assert guided_fields(Guided("grammar", 'root ::= "a"')) == {"grammar": 'root ::= "a"'}


@pytest.mark.parametrize("regex", [r"(?=a)b", r"(a)\1", "a+?", r"a\b", "a^b", "(a", "a)",
                                   "[ab", "{2}",
                                   r"\d", r"[\w]", r"a\s"])
def test_regexes_outside_the_subset_are_refused(regex: str) -> None:
    with pytest.raises(ValueError, match="regex"):
        regex_to_gbnf(regex)
