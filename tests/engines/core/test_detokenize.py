"""Streamed text and stop strings in our engines (engines.core.detokenize), against the
tokenizer's plain decode (the text checks' planted bugs: tests/testing/checks/test_stop_strings.py
and test_streamed_text.py)."""

from __future__ import annotations

from typing import Any

import pytest

from engines.core.detokenize import IncrementalText
from engines.paged.engine import PagedEngine
from engines.protocol import FinishReason, Request, SamplingParams, StepOutput, capabilities_of
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from engines.testing.features.stop_strings import stop_string_workload
from engines.testing.limits import EngineLimits
from engines.testing.text import decode, stop_tokens, tokenizer


def _byte_ids(tok: Any) -> dict[int, int]:
    """Byte value -> the id of its one-byte token (byte-level BPE: GPT-2's byte alphabet)."""
    shown = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in shown:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return {b: tok.token_to_id(c) for b, c in chars.items()}


@pytest.fixture(scope="module")
def tok() -> Any:
    return tokenizer(capabilities_of(SequentialEngine()).tokenizer)


def _ids(tok: Any, text: str) -> list[int]:
    """One token per byte of `text`: every character cut as finely as it can be."""
    ids = _byte_ids(tok)
    return [ids[b] for b in text.encode()]


def _stream(tok: Any, ids: list[int], stop: tuple[str, ...] = (), include: bool = False
            ) -> tuple[list[str], int | None]:
    """The deltas, and after how many tokens a stop string ended it (None: never)."""
    text = IncrementalText(tok, stop, include)
    out = []
    for k, t in enumerate(ids, 1):
        stopped = text.add(t)
        out.append(text.delta(final=stopped or k == len(ids)))
        if stopped:
            return out, k
    return out, None


def test_a_cut_character_waits_for_its_last_byte(tok: Any) -> None:
    ids = _ids(tok, "a中b")
    deltas, _ = _stream(tok, ids)
    assert deltas == ["a", "", "", "中", "b"]
    assert "".join(deltas) == decode(tok, ids)


def test_a_cut_character_at_the_end_is_handed_out_as_the_decode_has_it(tok: Any) -> None:
    ids = _ids(tok, "a中")[:-1]  # the request ends inside the character
    deltas, _ = _stream(tok, ids)
    assert "".join(deltas) == decode(tok, ids) == "a\ufffd"


def test_a_stop_string_spanning_tokens_ends_at_the_token_completing_it(tok: Any) -> None:
    ids = _ids(tok, "xy中z世界")
    for include, text in ((False, "xy"), (True, "xy中z")):
        deltas, k = _stream(tok, ids, ("中z",), include)
        assert k == 6 and "".join(deltas) == text  # 1+1+3 bytes, then "z"
    # The last character held back while a stop string could begin with it: "y" waits for
    # "中" to complete, "中" for "z".
    deltas, _ = _stream(tok, ids, ("中z",))
    assert deltas[:5] == ["", "x", "", "", "y"]


def test_which_stop_string_wins_in_one_token(tok: Any) -> None:
    """The one ending first in the text; of those ending at one character, the longest."""
    word = [tok.token_to_id(t) for t in ("the",)]
    assert None not in word
    deltas, k = _stream(tok, word, ("he", "t"), include=True)
    assert (k, "".join(deltas)) == (1, "t")
    deltas, k = _stream(tok, word, ("he", "the"), include=True)
    assert (k, "".join(deltas)) == (1, "the")


def test_stop_strings_wait_for_min_tokens() -> None:
    engine = SequentialEngine()
    prompt, plain = (1, 2, 3), SamplingParams(max_tokens=8)
    own = _run(engine, [Request(prompt, plain, request_id="a")])["a"]
    first = "".join(o.text or "" for o in own[:1])
    if not first:
        pytest.skip("the first token of this output has no complete character")
    late = SamplingParams(max_tokens=8, stop=(first[0],), min_tokens=1)
    got = _run(engine, [Request(prompt, late, request_id="b")])["b"]
    assert sum(len(o.token_ids) for o in got) > 1


def _run(engine: Any, requests: list[Request]) -> dict[Any, list[StepOutput]]:
    for r in requests:
        engine.add_request(r)
    outs: dict[Any, list[StepOutput]] = {}
    while engine.has_work():
        for o in engine.step():
            outs.setdefault(o.request_id, []).append(o)
    return outs


def _summary(outs: list[StepOutput]) -> tuple[tuple[int, ...], str, FinishReason | None]:
    return (tuple(t for o in outs for t in o.token_ids), "".join(o.text or "" for o in outs),
            outs[-1].finish_reason)


@pytest.mark.parametrize("make", [StaticBatchEngine, ContinuousBatchEngine, PagedEngine])
def test_batched_engines_stop_where_the_reference_does_alone(make: Any, tok: Any) -> None:
    """The hand-picked stop strings, all at once on a batched engine: tokens, text and finish
    the sequential reference's, request by request; and the text the oracle's."""
    reference = SequentialEngine()

    def alone(prompt: Any, params: SamplingParams) -> tuple[int, ...]:
        return _summary(_run(reference, [Request(tuple(prompt), params, request_id="x")])["x"])[0]

    w = stop_string_workload(EngineLimits.of(reference), alone)
    assert w is not None
    batched = _run(make(), list(w.requests))
    stopped = 0
    for r in w.requests:
        expected = _summary(_run(reference, [r])[r.request_id])
        got = _summary(batched[r.request_id])
        assert got == expected, r
        at = stop_tokens(tok, got[0], r.params.stop)
        if at is not None and got[2] == FinishReason.STOP:
            stopped += 1
            assert len(got[0]) == at.earliest
    assert stopped >= 3  # the spanning, the multi-byte and the last-token ones at least
