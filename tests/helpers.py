"""What the repo's tests share (not part of the shipped suite): small engine drivers, and
hand-built Traces with a table oracle for the property tests. Test modules import from here,
never from each other."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from engines.models import load_model
from engines.protocol import Engine, FinishReason, Request, SamplingParams, StepOutput
from engines.testing.judging import Judge, Violation
from engines.testing.oracle import Alone
from engines.testing.recorder import StepRecord, Trace
from engines.testing.workload import Abort, BadRequest, Workload


def make_prompts(lengths: Iterable[int], seed: int = 0, vocab: int = 1024) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed)
    return [tuple(torch.randint(0, vocab, (n,), generator=gen).tolist()) for n in lengths]


def hf_generate(prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """transformers' own greedy generate, one request alone: the ground truth."""
    model: Any = load_model("tiny")  # generate() is untyped in transformers' stubs
    ids = torch.tensor([prompt])
    # An explicit mask: generate would otherwise mask every token equal to pad_token_id.
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False
    )
    return out[0, len(prompt) :].tolist()


def preset_generate(preset: str, prompt: tuple[int, ...], max_tokens: int) -> list[int]:
    """hf_generate on another preset (the zoo's): transformers' own greedy generate, alone."""
    model: Any = load_model(preset)
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False
    )
    return out[0, len(prompt) :].tolist()


def drain(
    engine: Engine,
    requests: Iterable[Request],
    *,
    on_step: Callable[[int, list[StepOutput]], None] | None = None,
    max_steps: int = 10_000,
) -> dict[Hashable, tuple[list[int], FinishReason | None]]:
    """Add all requests, step until done; return tokens and finish reason per request id."""
    results: dict[Hashable, tuple[list[int], FinishReason | None]] = {}
    for request in requests:
        engine.add_request(request)
        results[request.request_id] = ([], None)
    for step in range(max_steps):
        if not engine.has_work():
            return results
        outputs = engine.step()
        for out in outputs:
            tokens, reason = results.setdefault(out.request_id, ([], None))
            assert reason is None, f"output for {out.request_id!r} after it finished"
            results[out.request_id] = (tokens + list(out.token_ids), out.finish_reason)
        if on_step:
            on_step(step, outputs)
    raise AssertionError(f"engine still has work after {max_steps} steps")


def run_tokens(engine: Engine, requests: Iterable[Request]) -> dict[Hashable, list[int]]:
    """Add all requests, step until done; return each request's tokens (no finish checks)."""
    for r in requests:
        engine.add_request(r)
    out: dict[Hashable, list[int]] = {}
    while engine.has_work():
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.token_ids)
    return out


def assert_top_logprobs_match_the_reference(engine: Engine, prompt: tuple[int, ...],
                                            params: SamplingParams) -> list[StepOutput]:
    """Serve `prompt` alone on `engine` and on the sequential reference: the same tokens, and
    at every token the same top candidates with logprobs within 1e-3. Returns the engine's
    outputs."""
    from engines.sequential import SequentialEngine

    outs = []
    for e in (engine, SequentialEngine()):
        e.add_request(Request(prompt, params))
        got: list[StepOutput] = []
        while e.has_work():
            got += e.step()
        outs.append(got)
    flat, flat_ref = ([(t, m) for o in got for t, m in zip(o.token_ids, o.top_logprobs or (),
                                                           strict=True)] for got in outs)
    assert [t for t, _ in flat] == [t for t, _ in flat_ref]
    for (_, m), (_, r) in zip(flat, flat_ref, strict=True):
        assert sorted(m) == sorted(r)
        assert [m[k] for k in sorted(m)] == pytest.approx([r[k] for k in sorted(r)], abs=1e-3)
    return outs[0]


def alone(requests: Sequence[Request]) -> dict[Hashable, list[int]]:
    """Each request served alone by the sequential reference (it serves one at a time)."""
    from engines.sequential import SequentialEngine

    copies = [Request(r.prompt_token_ids, r.params) for r in requests]
    got = drain(SequentialEngine(), copies)
    return {r.request_id: got[c.request_id][0] for r, c in zip(requests, copies, strict=True)}


def greedy(prompts: Iterable[tuple[int, ...]], budgets: Iterable[int]) -> list[Request]:
    return [Request(p, SamplingParams(max_tokens=n)) for p, n in zip(prompts, budgets, strict=True)]


def one_slot_continuous() -> Engine:
    """The continuous engine with one slot: a config variant (--engine-variant) of the default
    engine, which must give every request the same tokens."""
    from engines.slot.continuous import ContinuousBatchEngine

    return ContinuousBatchEngine(max_batch_size=1)


# Hand-built Traces for the property tests.

TABLE = {(1, 2): (5, 6, 7), (3,): (8, 9)}  # prompt -> its greedy tokens served alone


class Table:
    """Alone answers from a table of prompt -> greedy tokens, as AloneOracle would give them,
    for any context that is a prompt plus a prefix of its tokens (a stop id ends a request
    with STOP); seeded requests draw from (prompt, seed)."""

    def __init__(self, table: Mapping[tuple[int, ...], tuple[int, ...]] = TABLE,
                 flat: bool = True) -> None:
        self.table = table
        self.flat = flat  # top_at: 50 candidates of 2% each (a sampler's worth of doubt)
        self.served = 0

    def __call__(self, prompt: Sequence[int], params: SamplingParams, *,
                 lora_path: str | None = None) -> Alone:
        return self.serve(tuple(prompt), params, lora_path=lora_path)

    def serve(self, prompt: tuple[int, ...], params: SamplingParams, *,
              lora_path: str | None = None) -> Alone:
        assert lora_path is None, "the table holds base-model answers only"
        self.served += 1
        if params.temperature > 0:
            tokens = tuple((hash((prompt, params.seed, i)) % 97) for i in
                           range(params.max_tokens))
            return Alone(tokens, FinishReason.LENGTH, None)
        for key, known in self.table.items():
            done = prompt[len(key):]
            if prompt[: len(key)] == key and tuple(known[: len(done)]) == done:
                out = tuple(known[len(done): len(done) + params.max_tokens])
                stops = [i for i, t in enumerate(out) if t in params.stop_token_ids]
                if stops:
                    return Alone(out[: stops[0] + 1], FinishReason.STOP, None)
                return Alone(out, FinishReason.LENGTH, None)
        raise KeyError(prompt)

    def tokens(self, prompt: Sequence[int], params: SamplingParams) -> tuple[int, ...]:
        return self(prompt, params).tokens

    def top_at(self, context: Sequence[int]) -> Mapping[int, float] | None:
        return {t: math.log(0.02) for t in range(50)} if self.flat else None


def judge(**kw: object) -> Judge:
    """A Judge over the table (keywords: Judge's, e.g. reference=Table(...), variants=...)."""
    return Judge(Table(), **kw)  # type: ignore[arg-type]


JUDGE = judge()
R0 = Request((1, 2), SamplingParams(max_tokens=3), request_id="r0")
R1 = Request((3,), SamplingParams(max_tokens=2), request_id="r1")

Out = tuple[Hashable, tuple[int, ...], FinishReason | None]
Steps = list[list[Out]]  # one list of outputs per step


def trace(steps: list[list[Out]], *, requests: tuple[Request, ...] = (R0, R1),
          tables: list[tuple[Hashable | None, ...]] | None = None,
          lengths: list[tuple[int, ...]] | None = None, wasted: list[int] | None = None,
          waiting: list[set[str]] | None = None, holders: list[set[str]] | None = None,
          aborts: tuple[Abort, ...] = (), bad: tuple[BadRequest, ...] = (),
          stalled: bool = False) -> Trace:
    """A Trace as the Recorder would have made it: every request arrives before step 0."""
    w = Workload(requests, tuple(0 for _ in requests), aborts, bad)
    t = Trace(w, slots=tables is not None, max_batch_size=2 if tables is not None else None,
              stalled=stalled)
    for a in aborts:
        t.aborted_at.setdefault(a.request_id, a.step)
    for k, outs in enumerate(steps):
        rec = StepRecord(k, [StepOutput(rid, toks, why) for rid, toks, why in outs],
                         frozenset((waiting or [set()] * len(steps))[k]),
                         frozenset((holders or [set()] * len(steps))[k]),
                         tables[k] if tables else None, lengths[k] if lengths else None,
                         wasted[k] if wasted else 0)
        for out in rec.outputs:
            t.outputs.setdefault(out.request_id, []).append((k, out))
            if out.finished:
                t.finished_at.setdefault(out.request_id, k)
        t.steps.append(rec)
    return t


GOOD: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
               [("r0", (6,), None), ("r1", (9,), FinishReason.LENGTH)],
               [("r0", (7,), FinishReason.LENGTH)]]
# GOOD as a speculating engine's steps carry it: step 1 gives r0 two tokens (one accepted
# draft and the bonus) and r1 one (no draft), the ragged batch of rows with and without
# drafts in one step.
MULTI_TOKEN: Steps = [[("r0", (5,), None), ("r1", (8,), None)],
                      [("r0", (6, 7), FinishReason.LENGTH), ("r1", (9,), FinishReason.LENGTH)]]


def fails(check: Callable[[Trace, Judge], object], t: Trace, match: str,
          j: Judge = JUDGE) -> Violation:
    """The Violation check raises on t (judged by j), whose message matches `match`."""
    with pytest.raises(Violation, match=match) as caught:
        check(t, j)
    return caught.value


def assert_generate_tokens_with_mid_run_arrivals(engine: Engine, lengths: list[int]) -> None:
    """Four greedy requests, the last two added while the first two are mid-decode: each
    gets transformers' own generate tokens alone and finishes with LENGTH (an adapter test)."""
    prompts = make_prompts(lengths, seed=5)
    budgets = [6, 3, 1, 4]
    requests = greedy(prompts, budgets)
    early, late = requests[:2], requests[2:]

    def arrive(step: int, _: object) -> None:
        if step == 1:  # while the first two are mid-decode
            for r in late:
                engine.add_request(r)

    got = drain(engine, early, on_step=arrive)
    for r, budget in zip(requests, budgets, strict=True):
        assert got[r.request_id] == (hf_generate(r.prompt_token_ids, budget),
                                     FinishReason.LENGTH), f"request {r.request_id}"


def abort_one_of_two_mid_run(engine: Engine) -> tuple[tuple[int, ...], list[StepOutput]]:
    """Two requests of one prompt; after 3 steps abort "victim" (and an id never added): the
    next step gives victim one empty ABORT output. Returns the prompt and every output after
    the abort but that one (an adapter test; the caller checks they are all the other
    request's). "other" must still run to its own end: an engine that computes on its own
    threads (mistral.rs, a server) may hand out its last tokens in the abort's step already,
    so those count as after the abort too, and the end is checked here, not by `rest`'s
    length."""
    (prompt,) = make_prompts([5], seed=2)
    victim = Request(prompt, SamplingParams(max_tokens=20), request_id="victim")
    other = Request(prompt, SamplingParams(max_tokens=5), request_id="other")
    engine.add_request(victim)
    engine.add_request(other)
    before: list[StepOutput] = []
    for _ in range(3):
        before += engine.step()
    engine.abort_request("victim")  # type: ignore[attr-defined]
    engine.abort_request("never-added")  # type: ignore[attr-defined]
    assert engine.has_work()
    first = engine.step()
    aborted = [o for o in first if o.request_id == "victim"]
    assert len(aborted) == 1 and aborted[0].token_ids == () \
        and aborted[0].finish_reason is FinishReason.ABORT
    rest = [o for o in first if o.request_id != "victim"]
    while engine.has_work():
        rest += engine.step()
    ends = [o.finish_reason for o in before + rest
            if o.request_id == "other" and o.finish_reason is not None]
    assert ends in ([FinishReason.LENGTH], [FinishReason.STOP]), f"other ended {ends}"
    return prompt, rest


def assert_abort_frees_the_id(engine: Engine) -> None:
    """abort_one_of_two_mid_run, then only the other request's outputs follow, and the aborted
    id serves a new request with generate's tokens."""
    prompt, rest = abort_one_of_two_mid_run(engine)
    assert all(o.request_id == "other" for o in rest)
    again = Request(prompt, SamplingParams(max_tokens=4), request_id="victim")
    assert drain(engine, [again])["victim"] == (hf_generate(prompt, 4), FinishReason.LENGTH)



Children = dict[tuple[Hashable, int], tuple[list[int], FinishReason | None]]


def run_children(engine: Engine, requests: Iterable[Request], max_steps: int = 2000) -> Children:
    """Every child's tokens and finish, by (request id, index); each child finishes once."""
    out: Children = {}
    for r in requests:
        engine.add_request(r)
    for _ in range(max_steps):
        if not engine.has_work():
            return out
        for o in engine.step():
            tokens, finish = out.get((o.request_id, o.index), ([], None))
            assert finish is None, f"child {o.index} of {o.request_id} finished twice"
            out[(o.request_id, o.index)] = (tokens + list(o.token_ids), o.finish_reason)
    raise AssertionError("the engine never drained")


def beam_generate(model: Any, prompt: tuple[int, ...], p: SamplingParams) -> list[tuple[int, ...]]:
    """transformers generate's n best beams (early_stopping="never", the rule of
    engines.core.beams), each cut after its first stop id (generate pads the shorter ones with
    the first stop id)."""
    eos = list(p.stop_token_ids) or None
    config = GenerationConfig(num_beams=p.beam_width, num_return_sequences=p.n,
                              length_penalty=p.length_penalty, do_sample=False,
                              early_stopping="never", max_new_tokens=p.max_tokens,
                              eos_token_id=eos, pad_token_id=eos[0] if eos else None,
                              min_new_tokens=p.min_tokens or None)
    with torch.inference_mode():
        rows = model.generate(torch.tensor([prompt]), generation_config=config,
                              attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    out = []
    for row in rows.tolist():
        gen = row[len(prompt):]
        end = next((k + 1 for k, t in enumerate(gen) if t in p.stop_token_ids), len(gen))
        out.append(tuple(gen[:end]))
    return out


def abort_a_beam_search(engine: Engine, prompt: tuple[int, ...], other_budget: int,
                        between: Callable[[], object] = lambda: None) -> None:
    """A beam search (width 3, n 2) beside another request: two steps, `between()`, then
    abort the search: each of its 2 children ends ABORT once, and the other request still
    finishes."""
    engine.add_request(Request(prompt, SamplingParams(max_tokens=8, beam_width=3, n=2),
                               request_id="b"))
    engine.add_request(Request((3,), SamplingParams(max_tokens=other_budget),
                               request_id="after"))
    engine.step()
    engine.step()
    between()
    engine.abort_request("b")  # type: ignore[attr-defined]
    outs = engine.step()
    assert sorted(o.index for o in outs if o.finish_reason == FinishReason.ABORT) == [0, 1]
    while engine.has_work():
        outs += engine.step()
    assert [o.finished for o in outs if o.request_id == "after"][-1]
