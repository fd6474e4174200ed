"""streamed_text: for an engine that declares a tokenizer, a request's text deltas
(StepOutput.text) concatenated equal the plain decode of its tokens (engines.testing.text),
and equal its text served alone. Catches a multi-byte character emitted twice or not at all
when it is cut across tokens (SGLang #31598: a CJK character duplicated in a stream), a stop
token's text leaking into the deltas where the tokens do not carry it (vLLM PR #55483), text
lost at the end of a request. Requests with stop strings are the stop_strings check's.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from engines.protocol import FinishReason, Request
from engines.testing.checks.base import Check
from engines.testing.checks.needs import TOKENIZER
from engines.testing.coverage import Coverage, Tally
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace
from engines.testing.text import REPLACEMENT, decode, tokenizer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["CHECK", "TALLY", "check_streamed_text", "cut_characters", "streamed"]


def streamed(trace: Trace, rid: Hashable) -> str | None:
    """The request's deltas concatenated, None if none of its outputs carried text."""
    texts = [o.text for _, o in trace.outputs.get(rid, [])]
    if all(t is None for t in texts):
        return None
    return "".join(t or "" for t in texts)


def deltas(trace: Trace, rid: Hashable) -> list[tuple[int, str | None]]:
    """(step, delta) of every output of the request, for a report."""
    return [(s, o.text) for s, o in trace.outputs.get(rid, [])]


def cut_characters(tok: Tokenizer, ids: Sequence[int]) -> bool:
    """Whether some prefix of the tokens ends in a cut multi-byte character that a later
    token completes (what makes incremental detokenization hard)."""
    whole = decode(tok, ids)
    for k in range(1, len(ids)):
        text = decode(tok, ids[:k])
        if text.endswith(REPLACEMENT) and not whole.startswith(text):
            return True
    return False


def first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _mismatch(r: Request, trace: Trace, got: str, expected: str, what: str) -> str:
    i = first_difference(got, expected)
    return (f"{describe(r, trace)} streamed text that is not {what}: they part at character "
            f"{i} (streamed {got[i:i + 12]!r}, expected {expected[i:i + 12]!r}). Streamed, "
            f"the deltas by step: {deltas(trace, r.request_id)}; expected {expected!r}; its "
            f"tokens {trace.tokens(r.request_id)}.")


def _add(coverage: Coverage, judged: tuple[int, int, int], check: str) -> None:
    for key, n in zip(("with streamed text judged", "with streamed text across a cut "
                       "multi-byte character", "got no streamed text (the engine returned "
                       "none)"), judged, strict=True):
        coverage.counts[key] += n


TALLY = Tally(_add)


def check_streamed_text(check: Check, trace: Trace, judge: Judge) -> tuple[int, int, int]:
    """Every request without stop strings: the deltas concatenated equal the decode of its
    tokens (a prefix of it if it was aborted or cut off; a request ended by a stop id may
    leave that token's text out, as vLLM does), and under exact parity the text served alone
    (when the tokens are the same: parity judges them)."""
    __tracebackhide__ = True
    assert trace.tokenizer is not None, f"{check.name} needs a declared tokenizer"
    tok = tokenizer(trace.tokenizer)
    judged = cut = none = 0
    for r in trace.workload.requests:
        rid, p = r.request_id, r.params
        if p.stop:
            continue
        got = streamed(trace, rid)
        if got is None:
            none += 1
            continue
        judged += 1
        toks = trace.tokens(rid)
        cut += cut_characters(tok, toks)
        full = decode(tok, toks)
        if rid in trace.aborted_at or rid not in trace.finished_at:
            if not full.startswith(got):
                raise check.fail(_mismatch(r, trace, got, full, "a prefix of the decode of "
                                           "its tokens (it was aborted or cut off)"))
            continue
        allowed = [full]
        if (trace.finish_reason(rid) == FinishReason.STOP and toks
                and toks[-1] in p.stop_token_ids):
            allowed.append(decode(tok, toks[:-1]))
        if got not in allowed:
            raise check.fail(_mismatch(r, trace, got, full, "the decode of its tokens"))
        if judge.parity == "exact" and judge.comparable(p):
            alone = judge.oracle(r.prompt_token_ids, p)
            if alone.text is not None and alone.tokens == tuple(toks) and alone.text != got:
                raise check.fail(_mismatch(r, trace, got, alone.text,
                                           "its text served alone"))
    return judged, cut, none


CHECK = Check("streamed_text", check_streamed_text, needs=(TOKENIZER,), tally=TALLY)
