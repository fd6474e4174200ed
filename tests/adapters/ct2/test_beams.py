"""The CTranslate2 adapter's beam search and n > 1 against transformers' generate on the same
weights: beam search equals `generate(num_beams, num_return_sequences, length_penalty,
early_stopping="never")` (with and without stop ids, batched with prompts of other lengths),
and n children each a child of their own (greedy children agree with greedy generate).

Skipped where ctranslate2 is not importable: it lives in its own venv, built by
`bash ci/ct2-env.sh` (run these with .venv-ct2/bin/python -m pytest).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import torch

from engines.models import load_model
from engines.protocol import Engine, FinishReason, Request, SamplingParams
from tests.helpers import Children, hf_generate, make_prompts, run_children

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
pytestmark = pytest.mark.skipif(
    not HAS_CT2, reason="ctranslate2 is not installed here: its venv is built by ci/ct2-env.sh")



@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    from engines.adapters.ct2 import make_engine

    eng = make_engine()
    yield eng
    assert not eng.has_work()




def _hf_beams(prompt: tuple[int, ...], p: SamplingParams,
              early_stopping: bool | str = "never") -> list[list[int]]:
    model: Any = load_model("tiny")
    ids = torch.tensor([prompt])
    stop = list(p.stop_token_ids) or None
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=p.max_tokens,
                         num_beams=p.beam_width, num_return_sequences=p.n,
                         length_penalty=p.length_penalty, early_stopping=early_stopping,
                         do_sample=False, eos_token_id=stop,
                         pad_token_id=stop[0] if stop else None)
    beams = []
    for seq in out[:, len(prompt):].tolist():
        # transformers pads a beam that ended at the stop id with the pad id (the stop id).
        cut = next((i + 1 for i, t in enumerate(seq) if stop and t in stop), len(seq))
        beams.append(seq[:cut])
    return beams


def _check_beams(engine: Engine, prompts: list[tuple[int, ...]], p: SamplingParams) -> None:
    requests = [Request(pr, p, request_id=f"b{i}") for i, pr in enumerate(prompts)]
    got = run_children(engine, requests)
    for r in requests:
        want = _hf_beams(r.prompt_token_ids, p)
        have = [got[(r.request_id, i)][0] for i in range(p.n)]
        assert have == want, (r.prompt_token_ids, p)
        for i, tokens in enumerate(have):
            finish = got[(r.request_id, i)][1]
            stopped = bool(tokens) and tokens[-1] in p.stop_token_ids
            assert finish == (FinishReason.STOP if stopped else FinishReason.LENGTH)


@pytest.mark.parametrize("length_penalty", [1.0, 0.0, 2.0])
@pytest.mark.parametrize(("beam_width", "n"), [(4, 2), (3, 3), (2, 1)])
def test_beams_equal_transformers_beam_search(engine: Engine, beam_width: int, n: int,
                                              length_penalty: float) -> None:
    """Three prompts of different lengths in one batch, no stop id: every beam to the budget."""
    p = SamplingParams(max_tokens=6, beam_width=beam_width, n=n, length_penalty=length_penalty)
    _check_beams(engine, make_prompts([5, 9, 3], seed=1), p)


def _stop_ids(prompt: tuple[int, ...]) -> list[int]:
    """Tokens the beams of `prompt` reach in their first steps: stop ids that end beams."""
    p = SamplingParams(max_tokens=6, beam_width=4, n=4)
    return sorted({t for beam in _hf_beams(prompt, p) for t in beam[:4]})[:6]


@pytest.mark.parametrize("length_penalty", [1.0, 2.0])
def test_beams_ended_by_stop_ids_equal_transformers(engine: Engine,
                                                    length_penalty: float) -> None:
    """Beams that end at a stop id (kept) against longer ones: the best by score, whatever
    their length. The library's default early stopping (transformers' early_stopping=True)
    would return beams that finished first over better longer ones: the test asserts it met
    such a case (where the adapter's patience matters) and beams ended by a stop id."""
    seen_stop = early_differs = False
    for prompt in make_prompts([5, 9, 3, 7], seed=2):
        for stop in _stop_ids(prompt):
            for n in (2, 4):
                p = SamplingParams(max_tokens=6, beam_width=4, n=n,
                                   length_penalty=length_penalty, stop_token_ids=(stop,))
                _check_beams(engine, [prompt], p)
                seen_stop = seen_stop or any(stop in b for b in _hf_beams(prompt, p))
                early_differs = early_differs or (_hf_beams(prompt, p, early_stopping=True)
                                                  != _hf_beams(prompt, p))
    assert seen_stop or early_differs, "no beam ended at a stop id: the test exercised nothing"
    if length_penalty > 1:  # long beams favoured: where early stopping gets it wrong
        assert early_differs, "early stopping never mattered: the patience went untested"


def test_greedy_children_agree_with_greedy_generate(engine: Engine) -> None:
    prompts = make_prompts([4, 7], seed=3)
    requests = [Request(pr, SamplingParams(max_tokens=5, n=3), request_id=f"g{i}")
                for i, pr in enumerate(prompts)]
    got = run_children(engine, requests)
    for r in requests:
        want = hf_generate(r.prompt_token_ids, 5)
        assert [got[(r.request_id, i)] for i in range(3)] == [(want, FinishReason.LENGTH)] * 3


def test_sampled_children_each_their_own(engine: Engine) -> None:
    """n sampled children: one stream each, full budget, not all the same (1024 tokens at
    temperature 1: identical children of 6 tokens are implausible); a stop id ends only the
    child that drew it."""
    prompts = make_prompts([4, 6], seed=4)
    requests = [Request(pr, SamplingParams(max_tokens=6, n=4, temperature=1.0),
                        request_id=f"s{i}") for i, pr in enumerate(prompts)]
    got = run_children(engine, requests)
    for r in requests:
        children = [got[(r.request_id, i)] for i in range(4)]
        assert all(f == FinishReason.LENGTH and len(t) == 6 for t, f in children)
        assert len({tuple(t) for t, _ in children}) > 1
    # A stop id drawn by one child: the first child's second token, if it comes again.
    first = got[("s0", 0)][0]
    stop = first[1]
    r = Request(prompts[0], SamplingParams(max_tokens=6, n=4, temperature=1.0,
                                           stop_token_ids=(stop,)), request_id="s-stop")
    for (_, _), (tokens, finish) in run_children(engine, [r]).items():
        assert stop not in tokens[:-1]
        assert finish == (FinishReason.STOP if tokens[-1] == stop else FinishReason.LENGTH)
        assert finish == FinishReason.STOP or len(tokens) == 6


def test_abort_a_request_with_children(engine: Engine) -> None:
    r = Request(make_prompts([5], seed=5)[0], SamplingParams(max_tokens=20, n=3,
                                                            temperature=1.0), request_id="a")
    engine.add_request(r)
    engine.step()
    engine.abort_request("a")  # type: ignore[attr-defined]
    outs = []
    for _ in range(100):
        if not engine.has_work():
            break
        outs += engine.step()
    # Each unfinished child ends ABORT once (none had finished: 20 tokens, no stop ids).
    assert sorted(o.index for o in outs if o.finish_reason == FinishReason.ABORT) == [0, 1, 2]
    assert not engine.has_work()


def _reference(requests: Iterable[Request]) -> Children:
    from engines.sequential import SequentialEngine

    return run_children(SequentialEngine(), requests)


def test_bad_words_equal_the_reference_batched_beside_other_lengths(engine: Engine) -> None:
    """bad_words through `suppress_sequences`: one token, two and three tokens, and the pair
    across the prompt's end (banned by the library only when a shorter prompt shares the
    batch: report 30, which the adapter's batching avoids)."""
    short, long = make_prompts([3, 7], seed=10)
    first = _reference([Request(long, SamplingParams(max_tokens=8), request_id="p")])
    g = first[("p", 0)][0]
    for bad in ([g[0]], [g[2], g[3]], [long[-1], g[0]], [g[1], g[2], g[3]]):
        requests = [Request(short, SamplingParams(max_tokens=8), request_id="s"),
                    Request(long, SamplingParams(max_tokens=8, bad_words=(tuple(bad),)),
                            request_id="l"),
                    Request(short, SamplingParams(max_tokens=8, bad_words=(tuple(bad),)),
                            request_id="sb")]
        assert run_children(engine, requests) == _reference(requests), bad


def test_the_library_bans_across_a_longer_prompts_end_in_a_batch() -> None:
    """Report 30 as it is on ctranslate2 4.8.5: the same prompt, alone and beside a
    shorter one, with the bad word (its last token, its first greedy token)."""
    import ctranslate2

    from engines.adapters.ct2.convert import ct2_dir, vocabulary
    from engines.models import DEFAULT_SEED

    path = ct2_dir("tiny", DEFAULT_SEED)
    words = vocabulary(path)
    gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    short, long = make_prompts([3, 7], seed=10)
    first = hf_generate(long, 1)[0]
    options = {"max_length": 4, "include_prompt_in_result": False, "end_token": [],
               "sampling_topk": 1, "suppress_sequences": [[words[long[-1]], words[first]]]}
    alone = gen.generate_batch([[words[t] for t in long]], **options)[0].sequences[0]
    batched = gen.generate_batch([[words[t] for t in short], [words[t] for t in long]],
                                 **options)[1].sequences[0]
    assert words.index(alone[0]) == first  # alone: not banned across the prompt's end
    assert words.index(batched[0]) != first  # beside a shorter prompt: banned


def test_the_library_continues_a_beam_past_a_stop_id() -> None:
    """Report 45 as it is on ctranslate2 4.8.5: a beam search takes its next beams from the
    best 2 x beam_size candidates, and where more than beam_size of them end at a stop id, an
    ended candidate stays a beam (its hypothesis registered as finished, and continued). With
    patience > 1 (the adapter's: it never stops early) the search goes on past that stop id,
    and returns beams that hold it before their end. Stop ids here: the 2nd to 4th best first
    tokens, so that 3 of the first step's 4 candidates end."""
    import ctranslate2

    from engines.adapters.ct2.convert import ct2_dir, vocabulary
    from engines.models import DEFAULT_SEED

    path = ct2_dir("tiny", DEFAULT_SEED)
    words = vocabulary(path)
    gen = ctranslate2.Generator(str(path), device="cpu", compute_type="float32")
    model: Any = load_model("tiny")
    past_a_stop = []
    for prompt in make_prompts([5, 9, 3, 7], seed=1):
        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0, -1]
        stops = logits.argsort(descending=True)[1:4].tolist()
        for max_length in (2, 3, 4):
            result = gen.generate_batch(
                [[words[t] for t in prompt]], max_length=max_length, beam_size=2,
                num_hypotheses=2, patience=float(max_length + 1),
                end_token=[words[s] for s in stops], return_end_token=True, sampling_topk=1,
                include_prompt_in_result=False)[0]
            beams = [[words.index(w) for w in beam] for beam in result.sequences]
            past_a_stop += [b for b in beams if any(t in stops for t in b[:-1])]
    assert past_a_stop, "no beam went past a stop id: report 45 no longer reproduces"
