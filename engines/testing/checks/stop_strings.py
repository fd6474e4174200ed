"""stop_strings: a request with stop strings ends at the token that completed the first one
in its generated text (not its prompt), finish STOP, even at its last budgeted token; its
streamed text ends at that stop string (cut before it, or after it with
include_stop_str_in_output); one that completes none is served as if it had none. Judged
against the tokenizer's plain decode of the tokens (engines.testing.text), and the text
against the request's served alone. Catches a stop string spanning two tokens or two steps
missed (vLLM PR #45636: the stop-string buffer split tokens), a stop string searched in the
prompt, text streamed past the stop string, and a stop string and a stop id or the budget in
one step (SGLang PR #28802) mishandled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from engines.protocol import FinishReason, Request
from engines.testing.checks.base import Check
from engines.testing.checks.needs import STOP_STRINGS, TOKENIZER
from engines.testing.checks.streamed_text import _mismatch, streamed
from engines.testing.coverage import Coverage, Tally
from engines.testing.features.children import FEATURE as CHILDREN_FEATURE
from engines.testing.judging.base import Judge, describe, step_of_token
from engines.testing.judging.streams import streams_of
from engines.testing.recorder import Trace
from engines.testing.text import StopAt, cuts, decode, stop_tokens, tokenizer, visible

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["CHECK", "TALLY", "check_stop_strings"]


def _about(r: Request, child: str = "") -> str:
    p = r.params
    return (f"{child.strip()}{', ' if child else ''}stop strings {list(p.stop)}"
            + (" (include_stop_str_in_output)" if p.include_stop_str_in_output else "")
            + (f", min_tokens {p.min_tokens}" if p.min_tokens else ""))


def _spans(tok: Tokenizer, toks: Sequence[int], at: StopAt, stop: Sequence[str]) -> bool:
    """Whether the stop string that completed at token `at.earliest` began in an earlier
    token's text (so that no one token's text holds it)."""
    last = decode(tok, toks[at.earliest - 1:at.earliest])
    return not any(s in last for s in stop)


def _completed(tok: Tokenizer, toks: Sequence[int], at: StopAt, stop: Sequence[str]) -> str:
    """Which stop string completed at token `at.earliest - 1` and the tokens it spans, in
    words: "the stop string 'ab' (tokens 2..3: ids [17, 40], texts 'xa', 'b')"."""
    k = at.earliest
    text = visible(decode(tok, toks[:k]))
    before = len(visible(decode(tok, toks[:k - 1])))
    # The stop string that completed: an occurrence ending past the text before token k - 1
    # (one completed earlier, within min_tokens, does not count), the earliest ending first.
    found = [(a + len(s), a, s) for s in stop
             if (a := text.find(s, max(0, before - len(s) + 1))) >= 0]
    if not found:
        return "a stop string"
    _, start, s = min(found)
    first = next(j for j in range(k) if len(visible(decode(tok, toks[:j + 1]))) > start)
    ids = list(toks[first:k])
    texts = ", ".join(repr(decode(tok, [t])) for t in ids)
    where = f"token {first}" if first == k - 1 else f"tokens {first}..{k - 1}"
    return f"the stop string {s!r} ({where}: ids {ids}, texts {texts})"


def _tokens(check: Check, trace: Trace, r: Request, tok: Tokenizer, at: StopAt | None,
            child: str = "") -> bool:
    """Judge where the tokens end; True if a stop string ended the request."""
    __tracebackhide__ = True
    rid, p = r.request_id, r.params
    toks = trace.tokens(rid)
    reason = trace.finish_reason(rid)
    ends = set() if at is None else {at.earliest, at.latest or at.earliest}
    if at is not None and len(toks) > max(ends):
        k = at.earliest
        raise check.fail(
            f"{describe(r, trace)} with {_about(r, child)}: its text "
            f"{visible(decode(tok, toks[:k]))!r} holds {_completed(tok, toks, at, p.stop)} "
            f"once its token {k - 1} "
            f"(step {step_of_token(trace, rid, k - 1)}) is out, but it went on to "
            f"{len(toks)} tokens {toks}, finishing {reason}. Expected it to end there "
            "with STOP" + (" (the stop string spans tokens)" if _spans(tok, toks, at, p.stop)
                           else "") + ".")
    by_id = bool(toks) and toks[-1] in p.stop_token_ids
    if reason == FinishReason.STOP and not by_id and p.guided is None and len(toks) not in ends:
        raise check.fail(
            f"{describe(r, trace)} with {_about(r, child)} finished STOP after {len(toks)} tokens "
            f"{toks}, whose generated text {decode(tok, toks)!r} completes no stop string "
            "there and whose last token is no stop id. " + (
                f"It was aborted at step {trace.aborted_at[rid]}: expected ABORT." if rid in
                trace.aborted_at else "(Was the prompt searched, or text from another "
                "request?)"))
    if len(toks) in ends and reason not in (FinishReason.STOP, FinishReason.ABORT):
        raise check.fail(
            f"{describe(r, trace)} with {_about(r, child)}: its text "
            f"{visible(decode(tok, toks))!r} completes "
            f"{_completed(tok, toks, at, p.stop) if at is not None else 'a stop string'} "
            f"with its last token {len(toks) - 1} (step "
            f"{step_of_token(trace, rid, len(toks) - 1)}), but it finished {reason}. Expected "
            "STOP: the token that completes a stop string ends the request STOP, whatever "
            "else (its budget) ends it at the same token.")
    return len(toks) in ends and reason == FinishReason.STOP


def _add(coverage: Coverage, judged: tuple[int, int, int, int], check: str) -> None:
    for key, n in zip(("ended by a stop string", "ended by a stop string spanning tokens",
                       "with stop strings never completed", "with stop strings and no "
                       "streamed text (tokens judged only)"), judged, strict=True):
        coverage.counts[key] += n


TALLY = Tally(_add)


def _judge_stream(check: Check, trace: Trace, judge: Judge, r: Request, tok: Tokenizer,
                  child: str) -> tuple[int, int, int, int]:
    """One stream of a request with stop strings (the request's, or one child's: `child`
    names it): (hit, spanning, missed, no text), each 0 or 1."""
    __tracebackhide__ = True
    rid, p = r.request_id, r.params
    hit = spanning = missed = no_text = 0
    toks = trace.tokens(rid)
    at = stop_tokens(tok, toks, p.stop, min_tokens=p.min_tokens)
    stopped = _tokens(check, trace, r, tok, at, child)
    if stopped and at is not None:
        hit += 1
        spanning += _spans(tok, toks, at, p.stop)
    elif rid in trace.finished_at:
        missed += 1
    got = streamed(trace, rid)
    if got is None:
        return hit, spanning, missed, 1
    full = decode(tok, toks)
    by_id = bool(toks) and toks[-1] in p.stop_token_ids
    # A stop id on the same token may win (the whole decode, or vLLM's, without it).
    allowed = {full, decode(tok, toks[:-1])} if by_id else set()
    if stopped and at is not None:
        before = len(visible(decode(tok, toks[:at.earliest - 1])))
        allowed |= cuts(full, before, p.stop, p.include_stop_str_in_output)
    elif not by_id:
        allowed.add(full)
    if rid in trace.aborted_at or rid not in trace.finished_at:
        if not full.startswith(got):
            raise check.fail(_mismatch(r, trace, got, full, "a prefix of the decode of "
                                       f"its tokens (it was aborted or cut off){child}"))
        return hit, spanning, missed, no_text
    if got not in allowed:
        expected = min(allowed, key=len) if stopped else full
        raise check.fail(_mismatch(r, trace, got, expected, (
            f"the decode of its tokens cut at the stop string ({_about(r, child)})" if stopped
            else f"the decode of its tokens ({_about(r, child)}, none completed)")))
    if judge.parity == "exact" and judge.comparable(p) and not child:
        alone = judge.oracle(r.prompt_token_ids, p)
        if alone.text is not None and alone.tokens == tuple(toks) and alone.text != got:
            raise check.fail(_mismatch(r, trace, got, alone.text,
                                       f"its text served alone ({_about(r, child)})"))
    return hit, spanning, missed, no_text


def check_stop_strings(check: Check, trace: Trace, judge: Judge) -> tuple[int, int, int, int]:
    """Every request with stop strings: its tokens end where the first one completed (or
    where the text settles after it: engines.testing.text), finish STOP; its text is the
    decode of its tokens cut at that stop string, or the whole decode if none completed (less
    a stop id's text, where vLLM leaves it out); a prefix of it if aborted; and under exact
    parity the same as served alone."""
    __tracebackhide__ = True
    assert trace.tokenizer is not None, f"{check.name} needs a declared tokenizer"
    tok = tokenizer(trace.tokenizer)
    hit = spanning = missed = no_text = 0
    for r in trace.workload.requests:
        if not r.params.stop:
            continue
        for child, view in streams_of(trace, r):  # each child of an n > 1 family alone
            counts = _judge_stream(check, view, judge, r, tok, child)
            hit, spanning, missed, no_text = (a + b for a, b in zip(
                (hit, spanning, missed, no_text), counts, strict=True))
    return hit, spanning, missed, no_text


# n > 1 families where every engine compared declares `n`: they carry stop strings drawn from
# one child's text (engines.testing.composition), each child judged as a stream of its own.
CHECK = Check("stop_strings", check_stop_strings, needs=(TOKENIZER, STOP_STRINGS),
              draws=(CHILDREN_FEATURE.use(),), tally=TALLY)
