"""Hypothesis draws of stop strings (SamplingParams.stop) for engines that declare them and a
tokenizer: strings the request will complete, taken from the decode of its own output served
alone (so they are hit, often spanning tokens and made of multi-byte characters), strings it
will not (from its prompt's text, which must not stop anything, or text it never produces),
several at once, with and without include_stop_str_in_output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hypothesis import strategies as st

from engines.protocol import TEXT_PARAMS, Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.limits import EngineLimits
from engines.testing.text import REPLACEMENT, decode, tokenizer, visible
from engines.testing.workload import Abort, Workload

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["FEATURE", "HELD_BACK", "MISSES", "completed_by", "draws_stop_strings",
           "held_back_workload", "stop_string_params", "stop_string_workload"]

# Text no preset's output is likely to hold, ASCII and multi-byte alike; a drawn one that the
# output does hold is simply a hit.
MISSES = ("§§", "\u2603x", "zzq", "日本語😀")


def draws_stop_strings(limits: EngineLimits) -> bool:
    """Whether stop strings may be drawn: every engine compared declares them, and the engine
    declares the tokenizer that gives them their meaning."""
    return limits.tokenizer is not None and TEXT_PARAMS <= limits.sampling_fields


def _pieces(text: str, draw: st.DrawFn, label: str) -> str:
    """A substring of `text` of 1..6 characters (text is non-empty)."""
    end = draw(st.integers(1, len(text)), label=f"{label}_end")
    size = draw(st.integers(1, min(6, end)), label=f"{label}_size")
    return text[end - size:end]


@st.composite
def _hit(draw: st.DrawFn, tok: Tokenizer, own: Sequence[int], text: str) -> str:
    """A substring of the output's text: most often one across a token boundary (the
    characters on either side came with different tokens, so in different steps)."""
    bounds = sorted({len(visible(decode(tok, own[:k]))) for k in range(1, len(own))}
                    - {0, len(text)})
    if not bounds or draw(st.integers(0, 3), label="within_a_token") == 0:
        return _pieces(text, draw, "stop_hit")
    b = draw(st.sampled_from(bounds), label="boundary")
    left = draw(st.integers(1, min(3, b)), label="left")
    right = draw(st.integers(1, min(3, len(text) - b)), label="right")
    return text[b - left:b + right]


@st.composite
def stop_string_params(draw: st.DrawFn, limits: EngineLimits, own: Sequence[int],
                 prompt: Sequence[int], params: SamplingParams) -> SamplingParams:
    """`params` with stop strings drawn against `own` (the request's output served alone),
    or unchanged. min_tokens is turned off where they are drawn: the stop strings are about
    where text completes them."""
    assert limits.tokenizer is not None
    kind = draw(st.sampled_from(["none", "none", "hit", "hit", "miss", "prompt", "several"]),
                label="stop_kind")
    if kind == "none":
        return params
    tok = tokenizer(limits.tokenizer)
    text = visible(decode(tok, own))
    found: list[str] = []
    if kind in ("hit", "several") and text:
        found.append(draw(_hit(tok, own, text), label="stop_hit"))
    if kind in ("miss", "several"):
        found.append(draw(st.sampled_from(MISSES), label="stop_miss"))
    if kind in ("prompt", "several"):
        said = visible(decode(tok, prompt))
        if said:
            found.append(_pieces(said, draw, "stop_prompt"))
    stop = tuple(dict.fromkeys(s for s in found if s and REPLACEMENT not in s))
    if not stop:
        return params
    include = draw(st.booleans(), label="include_stop_str_in_output")
    return dataclasses.replace(params, stop=stop, include_stop_str_in_output=include,
                               min_tokens=0)


def _spanning(texts: Sequence[str]) -> tuple[int, str] | None:
    """(k, s): a two-character string whose first occurrence in texts[k + 1] straddles the
    end of texts[k] (texts: the visible text after each token)."""
    for k in range(len(texts) - 1):
        before, after = texts[k], texts[k + 1]
        if before and len(after) > len(before):
            s = after[len(before) - 1:len(before) + 1]
            if REPLACEMENT not in s and after.find(s) == len(before) - 1:
                return k, s
    return None


def _ending_in_whitespace(text: str) -> str | None:
    """A two-character string of `text` whose second character is whitespace and first is
    not, at its first occurrence (None where the text has none)."""
    for i in range(1, len(text)):
        s = text[i - 1:i + 1]
        if (text[i].isspace() and not text[i - 1].isspace() and REPLACEMENT not in s
                and text.find(s) == i - 1):
            return s
    return None


def completed_by(limits: EngineLimits, own: Sequence[int]) -> str | None:
    """A stop string `own` (an output) completes: two characters across a token boundary, the
    first such; else its last visible character; None where its text has none."""
    assert limits.tokenizer is not None
    tok = tokenizer(limits.tokenizer)
    texts = [visible(decode(tok, own[:k])) for k in range(len(own) + 1)]
    span = _spanning(texts)
    if span is not None:
        return span[1]
    last = texts[-1].rstrip(REPLACEMENT)
    return last[-1] if last else None


def stop_string_workload(limits: EngineLimits, alone: AloneFn) -> Workload | None:
    """The hand-picked stop strings, from greedy outputs served alone: one spanning two
    tokens; a multi-byte character; one completed by a token that is also a stop id; one
    completed by the last budgeted token (STOP, not LENGTH), kept in the text; one only the
    prompt holds; one never produced; one ending in whitespace (a detokenizer that holds a
    trailing space back, or strips it, must still stop there). None where the engine cannot
    be sent them."""
    if not draws_stop_strings(limits):
        return None
    assert limits.tokenizer is not None
    tok = tokenizer(limits.tokenizer)
    budget = max(1, min(12, limits.max_model_len - 8))
    prompts = [(1, 2, 3), (4, 5), (6, 7, 8), (9, 10), (11, 12, 13), (2, 4, 6, 8), (3, 5, 7, 9)]
    plain = SamplingParams(max_tokens=budget, logprobs=limits.logprobs)
    outs = [alone(p, plain) for p in prompts]
    texts = [[visible(decode(tok, own[:k])) for k in range(len(own) + 1)] for own in outs]
    found: list[SamplingParams] = []
    span = _spanning(texts[0])
    found.append(dataclasses.replace(plain, stop=(span[1],) if span else MISSES[:1]))
    wide = [c for c in texts[1][-1] if ord(c) > 0x7F and c != REPLACEMENT]
    found.append(dataclasses.replace(plain, stop=(wide[0],) if wide else MISSES[1:2]))
    both = texts[2]
    k = next((k for k in range(1, len(both)) if len(both[k]) > len(both[k - 1])), None)
    found.append(dataclasses.replace(plain, stop=(both[k][-1],), stop_token_ids=(
        outs[2][k - 1],)) if k is not None else plain)
    last = texts[3][-1]
    ends = next((last[-n:] for n in range(1, min(6, len(last)) + 1)
                 if REPLACEMENT not in last[-n:] and last.find(last[-n:]) == len(last) - n
                 and len(texts[3][-2]) < len(last) - n + 1), MISSES[2])
    found.append(dataclasses.replace(plain, stop=(ends,), include_stop_str_in_output=True))
    said = visible(decode(tok, prompts[4]))
    only = [c for c in said if c not in texts[4][-1] and c != REPLACEMENT]
    found.append(dataclasses.replace(plain, stop=(only[0],) if only else MISSES[3:]))
    found.append(dataclasses.replace(plain, stop=MISSES))
    spaced = _ending_in_whitespace(texts[6][-1])
    found.append(dataclasses.replace(plain, stop=(spaced,) if spaced else MISSES[:1]))
    reqs = tuple(Request(p, params, request_id=f"r{i}")
                 for i, (p, params) in enumerate(zip(prompts, found, strict=True)))
    return Workload(reqs, (0, 0, 0, 1, 1, 2, 2), label="stop strings at the edges")


HELD_BACK = "aborted while text is held back"


def held_back_workload(limits: EngineLimits) -> Workload | None:
    """Requests whose stop strings (MISSES: 3 and 4 characters) they never produce, so that
    the stream holds the last 2 or 3 characters of their text back all along (one might
    begin there), aborted at their third and fifth steps: the abort must finish them ABORT,
    whatever is held. None where the engine cannot be sent them or aborts nothing."""
    if not draws_stop_strings(limits) or not limits.abortable:
        return None
    budget = max(1, min(12, limits.max_model_len - 4))
    plain = SamplingParams(max_tokens=budget, logprobs=limits.logprobs)
    reqs = (Request((2, 9, 4), dataclasses.replace(plain, stop=MISSES[2:3]), request_id="r0"),
            Request((7, 3), dataclasses.replace(plain, stop=MISSES[3:]), request_id="r1"),
            Request((5, 8), dataclasses.replace(plain, stop=MISSES[2:3]), request_id="r2"))
    return Workload(reqs, (0, 0, 0), (Abort(2, "r0"), Abort(4, "r1")), label=HELD_BACK)


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    found = stop_string_workload(drawing, alone) if alone is not None else None
    held = held_back_workload(drawing)
    return [w for w in (found, held) if w is not None]


FEATURE = Feature("stop_strings", needs="stop and include_stop_str_in_output in "
                  "supported_sampling (of the engine and of every engine it is compared with), "
                  "and a tokenizer", declared=draws_stop_strings, everywhere=True,
                  stops=stop_string_params, seeds=_seeds)
