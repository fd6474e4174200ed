"""The independent reference (engines.independent) against the sequential one on the tiny
preset in fp32: for every feature it serves, a handful of requests whose hard case is built
from the request's own greedy continuation (a bad word it would complete, a stop string it
would write, an allowed set without its greedy token, a bias on a token it would not choose),
the same tokens, finish reasons, text and logprobs from both. The two share no processing
code (tests/test_layout.py), so agreement here is agreement of two
implementations, and the cases below must change what is generated (each asserts it)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import pytest

from engines.independent import IndependentEngine
from engines.loras import lora_dir
from engines.protocol import FinishReason, Guided, Request, SamplingParams, StepOutput
from engines.sequential import SequentialEngine

VOCAB = 1024
Served = list[tuple[tuple[int, ...], FinishReason | None, str, Any, Any, Any]]


@pytest.fixture(scope="module")
def engines() -> tuple[IndependentEngine, SequentialEngine]:
    return IndependentEngine(), SequentialEngine()


def serve(engine: Any, prompt: tuple[int, ...], p: SamplingParams) -> Served:
    """Each child's tokens, finish reason, text, top logprobs, logprobs, prompt logprobs."""
    engine.add_request(Request(prompt, p, request_id="r"))
    outs: dict[int, list[StepOutput]] = {}
    while engine.has_work():
        for o in engine.step():
            outs.setdefault(o.index, []).append(o)
    served = []
    for _, child in sorted(outs.items()):
        tops = [t for o in child for t in (o.top_logprobs or ())]
        lps = [x for o in child for x in (o.logprobs or ())]
        prompt_lps = next((o.prompt_logprobs for o in child if o.prompt_logprobs), None)
        served.append((tuple(t for o in child for t in o.token_ids), child[-1].finish_reason,
                       "".join(o.text or "" for o in child), tops, lps, prompt_lps))
    return served


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict | list | tuple) and isinstance(b, dict | list | tuple):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)  # type: ignore[union-attr]
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-4
    return bool(a == b)


def _prompts(seed: int, count: int = 4) -> Iterator[tuple[int, ...]]:
    rng = random.Random(seed)
    for _ in range(count):
        yield tuple(rng.randrange(VOCAB - 1) for _ in range(rng.randint(2, 9)))


def _greedy(engines: Any, prompt: tuple[int, ...], max_tokens: int = 10) -> tuple[int, ...]:
    return serve(engines[1], prompt, SamplingParams(max_tokens=max_tokens))[0][0]


def _agree(engines: Any, prompt: tuple[int, ...], p: SamplingParams) -> Served:
    ours, theirs = serve(engines[1], prompt, p), serve(engines[0], prompt, p)
    assert _close(theirs, ours), f"{prompt} {p}:\nindependent {theirs}\nsequential {ours}"
    return ours


def _cases(engines: Any, feature: str) -> Iterator[tuple[tuple[int, ...], SamplingParams]]:
    """(prompt, params) of `feature`, each built to change the greedy continuation."""
    for k, prompt in enumerate(_prompts(len(feature) * 31 + ord(feature[0]))):
        g = _greedy(engines, prompt)
        base = SamplingParams(max_tokens=10)
        if feature == "processing":
            yield prompt, dataclasses.replace(base, repetition_penalty=(1.8, 0.6)[k % 2])
            yield prompt, dataclasses.replace(base, presence_penalty=1.5, frequency_penalty=0.7)
            yield prompt, dataclasses.replace(base, min_tokens=5, stop_token_ids=g[:3])
        elif feature == "constraints":
            yield prompt, dataclasses.replace(base, bad_words=(g[2:4], (g[5],)))
            yield prompt, dataclasses.replace(base, logit_bias=((g[0], -50.0),
                                                                ((g[0] + 7) % VOCAB, 8.0)))
            kept = tuple(t for t in range(k * 50, k * 50 + 40) if t != g[0])
            yield prompt, dataclasses.replace(base, allowed_token_ids=kept)
            yield prompt, dataclasses.replace(base, guided=Guided(
                ("regex", "choice", "json_schema", "grammar")[k],
                ("[a-d]{2,5}x", ("yes", "no", "café"), '{"type": "boolean"}',
                 'root ::= "ab" [0-9]+')[k]))
        elif feature == "sampled":
            yield prompt, dataclasses.replace(base, temperature=0.8, seed=k, top_k=20,
                                              top_p=0.9, min_p=0.05, logprobs=3)
            yield prompt, dataclasses.replace(base, temperature=1.0, seed=k + 9, n=3)
        elif feature == "output":
            yield prompt, dataclasses.replace(base, logprobs=4, prompt_logprobs=3)
            yield prompt, SamplingParams(max_tokens=6, beam_width=3, n=2,
                                         length_penalty=(1.0, 0.0, 2.0, -1.0)[k],
                                         stop_token_ids=g[1:2])
            # min_tokens with beams: the greedy first token a stop id it holds back.
            yield prompt, SamplingParams(max_tokens=5, beam_width=2, n=2, min_tokens=2,
                                         stop_token_ids=g[0:2])
            yield prompt, dataclasses.replace(base, n=2, stop_token_ids=g[4:5])


@pytest.mark.parametrize("feature", ["processing", "constraints", "sampled", "output"])
def test_the_two_references_agree(engines: Any, feature: str) -> None:
    changed = 0
    for prompt, p in _cases(engines, feature):
        served = _agree(engines, prompt, p)
        changed += served[0][0] != _greedy(engines, prompt)[: len(served[0][0])]
    # The cases bit: they moved the tokens off the greedy continuation (of the output
    # surface, beam search does).
    assert changed >= (1 if feature == "output" else 3)


def _piece(text: str, start: int, n: int) -> str:
    """text[start:start + n], or the first such piece after it without U+FFFD: the decode's
    make of bytes that are no character, which StopStringCriteria, matching token strings,
    never sees (docs/architecture.md, "The independent reference")."""
    start %= len(text)
    for at in range(start, len(text) - n + 1):
        if "\ufffd" not in text[at:at + n]:
            return text[at:at + n]
    return text[start:start + n]


def test_stop_strings_agree_including_the_text(engines: Any) -> None:
    """Stop strings cut from the text the continuation writes (two characters mid-text, which
    often span two tokens or end inside one; the last three), with and without
    include_stop_str_in_output, and one held back by min_tokens."""
    stopped = 0
    for prompt in _prompts(7, 6):
        g = _greedy(engines, prompt, 12)
        text = serve(engines[1], prompt, SamplingParams(max_tokens=12))[0][2]
        if len(text) < 4:
            continue
        mid = len(text) // 2
        for stop, include, least in (((_piece(text, mid - 1, 2),), False, 0),
                                     ((_piece(text, mid, 2), _piece(text, -3, 3)), True, 0),
                                     ((_piece(text, 1, 2),), False, 3)):
            p = SamplingParams(max_tokens=12, stop=stop, include_stop_str_in_output=include,
                               min_tokens=least)
            served = _agree(engines, prompt, p)
            stopped += served[0][1] == FinishReason.STOP and served[0][0] != g
    assert stopped >= 4


def test_lora_adapters_agree(engines: Any) -> None:
    path = str(lora_dir("tiny", 0))
    independent, sequential = IndependentEngine(loras={"a": path}), SequentialEngine(
        loras={"a": path})
    moved = 0
    for prompt in _prompts(3):
        p = SamplingParams(max_tokens=8, logprobs=2)
        request = Request(prompt, p, request_id="r", lora="a")
        got = []
        for engine in (independent, sequential):
            engine.add_request(request)
            outs = []
            while engine.has_work():
                outs += engine.step()
            got.append((tuple(t for o in outs for t in o.token_ids),
                        [t for o in outs for t in (o.top_logprobs or ())]))
        assert _close(got[0], got[1]), (prompt, got)
        moved += got[0][0] != _greedy(engines, prompt, 8)
    assert moved >= 1  # the adapter changed a continuation
