"""Constraints on our engines (engines.core.constraints, engines.core.guided): what each
field means, the batched mask equal to the reference's row by row, and the batched engines
equal to the sequential reference over mixes of constrained and unconstrained requests that
join, leave (finish, abort) and are compacted mid-batch."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
import torch

from engines.core.constraints import batch_mask, ending_bans, row_mask
from engines.core.request_state import RequestState
from engines.paged import PagedEngine
from engines.protocol import Guided, InvalidRequest, Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.slot.continuous import ContinuousBatchEngine
from engines.slot.static import StaticBatchEngine
from engines.tokenizer import load

V = 1024
SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                     "required": ["ok"], "additionalProperties": False})
MIX = [
    SamplingParams(max_tokens=12),
    SamplingParams(max_tokens=10, allowed_token_ids=(5, 9, 77, 300)),
    SamplingParams(max_tokens=10, logit_bias=((7, 5.0), (12, 100.0))),
    SamplingParams(max_tokens=10, bad_words=((3,), (12, 12))),
    SamplingParams(max_tokens=10, logit_bias=((12, 100.0),), bad_words=((12, 12),)),
    SamplingParams(max_tokens=8, temperature=0.7, seed=3, logit_bias=((40, 4.0),)),
    SamplingParams(max_tokens=9, repetition_penalty=1.5, logit_bias=((81, -3.0), (477, 2.5))),
    SamplingParams(max_tokens=8, guided=Guided("choice", ("yes", "no", "maybe"))),
    SamplingParams(max_tokens=12, guided=Guided("regex", "[a-c]{2,5}")),
    SamplingParams(max_tokens=20, guided=Guided("json_schema", SCHEMA)),
    SamplingParams(max_tokens=12, guided=Guided("grammar", 'root ::= "a" | "b" root')),
    SamplingParams(max_tokens=6, temperature=1.0, seed=11, allowed_token_ids=(1, 2, 3, 4)),
]


def _serve(engine: Any, mix: Sequence[SamplingParams], *, abort: Hashable | None = None
           ) -> tuple[dict[Hashable, list[int]], dict[Hashable, str]]:
    out: dict[Hashable, list[int]] = {}
    fin: dict[Hashable, str] = {}
    pending = [Request((1 + i, 2, 3 + i), p, request_id=f"r{i}") for i, p in enumerate(mix)]
    step = 0
    while pending or engine.has_work():
        if pending and step % 2 == 0:  # staggered arrivals: requests join mid-batch
            engine.add_request(pending.pop(0))
        if step == 5 and abort is not None:
            engine.abort_request(abort)
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.token_ids)
            if o.finish_reason is not None:
                fin[o.request_id] = o.finish_reason.value
        step += 1
    return out, fin


def test_each_field_means_what_the_protocol_says() -> None:
    out, fin = _serve(SequentialEngine("tiny"), MIX)
    assert set(out["r1"]) <= {5, 9, 77, 300}
    assert set(out["r11"]) <= {1, 2, 3, 4}
    assert out["r2"] == [12] * 10  # +100 wins every step
    r3 = out["r3"]
    assert 3 not in r3 and not any(a == b == 12 for a, b in zip(r3, r3[1:], strict=False))
    # +100 on 12, but 12 12 banned: 12 every other token.
    assert out["r4"][0::2] == [12] * 5 and 12 not in out["r4"][1::2]
    tok = load("tiny")
    text = {r: tok.decode(ids) for r, ids in out.items()}
    assert fin["r7"] == "stop" and text["r7"] in ("yes", "no", "maybe")
    assert re.fullmatch("[a-c]{2,5}", text["r8"]) or (fin["r8"] == "length"
                                                     and re.fullmatch("[a-c]{0,5}", text["r8"]))
    if fin["r9"] == "stop":
        assert isinstance(json.loads(text["r9"])["ok"], bool)
    assert re.fullmatch("b*a?", text["r10"])


@pytest.mark.parametrize("engine", [
    lambda: ContinuousBatchEngine("tiny", max_batch_size=3),
    lambda: StaticBatchEngine("tiny", max_batch_size=4),
    lambda: PagedEngine("tiny", max_batch_size=4),
], ids=["continuous", "static", "paged"])
def test_batched_engines_equal_the_reference(engine: Any) -> None:
    # Mixed rows, joining at staggered steps, finishing at different lengths (compaction),
    # one aborted mid-run: every row keeps its own mask.
    ref, ref_fin = _serve(SequentialEngine("tiny"), MIX, abort="r3")
    got, got_fin = _serve(engine(), MIX, abort="r3")
    assert got_fin == ref_fin
    for rid, tokens in ref.items():
        if rid == "r3":  # aborted: a prefix, wherever the abort landed in each engine
            n = min(len(tokens), len(got[rid]))
            assert got[rid][:n] == tokens[:n]
        else:
            assert got[rid] == tokens, rid


def _state(params: SamplingParams, output: Sequence[int], engine: SequentialEngine
           ) -> RequestState:
    seq = RequestState(Request((1,), params))
    if params.guided is not None:
        seq.matcher = engine._grammars().matcher(params.guided)
    for t in output:
        seq.output.append(t)
        if seq.matcher is not None:
            seq.matcher.advance(t)
    return seq


def test_the_batched_mask_is_the_reference_mask_row_by_row() -> None:
    rng = random.Random(0)
    engine = SequentialEngine("tiny")
    tok = load("tiny")
    seqs = []
    for i in range(24):
        kind = rng.randrange(6)
        out = [rng.randrange(20) for _ in range(rng.randrange(4))]
        if kind == 0:
            p = SamplingParams()
        elif kind == 1:
            p = SamplingParams(allowed_token_ids=tuple(rng.sample(range(V), 5)))
        elif kind == 2:
            p = SamplingParams(logit_bias=tuple((t, rng.uniform(-100, 100))
                                                for t in rng.sample(range(V), 4)))
        elif kind == 3:
            p = SamplingParams(bad_words=((out[-1] if out else 3, 7), (9,), (1, 2, 3)))
        elif kind == 4:
            p = SamplingParams(guided=Guided("choice", ("yes", "no")))
            out = tok.encode("ye").ids if i % 2 else []
        else:
            p = SamplingParams(allowed_token_ids=(7, 8, 9), logit_bias=((8, 2.0), (100, 3.0)),
                               bad_words=((9,),))
        seqs.append(_state(p, out, engine))
    mask = batch_mask(seqs, V, torch.device("cpu"))
    assert mask is not None
    for r, seq in enumerate(seqs):
        row = row_mask(seq, V, torch.device("cpu"))
        expected = torch.zeros(1, V) if row is None else row
        assert torch.equal(mask[r:r + 1], expected), r
    assert batch_mask([_state(SamplingParams(), [], engine)], V, torch.device("cpu")) is None


def test_bad_word_endings() -> None:
    assert ending_bans([(4,), (1, 2), (1, 2, 3), (9, 9)], [0, 1, 2]) == [4, 3]
    assert ending_bans([(5, 6, 7)], [6]) == []


def test_a_grammar_that_does_not_compile_is_refused_by_name() -> None:
    engine = SequentialEngine("tiny")
    with pytest.raises(InvalidRequest, match=r"^guided.spec: '\[a-' is not a valid regex"):
        engine.add_request(Request((1,), SamplingParams(guided=Guided("regex", "[a-"))))
    with pytest.raises(InvalidRequest, match="^guided.spec: .* is not a valid json_schema"):
        engine.add_request(Request((1,), SamplingParams(guided=Guided("json_schema", "{"))))
    assert not engine.has_work()
