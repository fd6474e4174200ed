"""llama-server's wave-4 configurations behind the HTTP adapter (engines.adapters.http
.llama_variants): speculative decoding (a draft model, n-gram lookup) gives the reference's
greedy tokens with drafts proposed and accepted; logit_bias and allowed_token_ids as the
reference applies them; a request's LoRA adapter (converted from the zoo's PEFT one) as the
PEFT reference serves it.

Runs only where BATCHING_LLAMA_SERVER names the binary (bash ci/llama-server-env.sh builds
it; ci/test-third-party.sh sets it under ALL_VARIANTS), skipped visibly elsewhere. One test
per server, so that each server is launched once."""

from __future__ import annotations

import os

import pytest

httpx = pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http.servers import LLAMA_SERVER  # noqa: E402
from engines.protocol import Engine, Request, SamplingParams, capabilities_of  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.environ.get(LLAMA_SERVER),
    reason=f"{LLAMA_SERVER} does not name a llama-server binary (bash ci/llama-server-env.sh "
           "builds one; ci/test-third-party.sh sets it under ALL_VARIANTS): the real "
           "llama-server wave-4 tests did not run")


def _repetitive(n: int, seed: int) -> tuple[int, ...]:
    """A prompt of a short phrase said over and over: an n-gram drafter's best case."""
    from tests.helpers import make_prompts

    (phrase,) = make_prompts([5], seed=seed)
    return (phrase * (n // 5 + 1))[:n]


def _served(eng: Engine, requests: list[Request]) -> dict[object, list[int]]:
    from tests.helpers import run_tokens

    return run_tokens(eng, requests)  # type: ignore[return-value]


@pytest.mark.parametrize("factory", ["llama_server_draft", "llama_server_ngram_simple"])
def test_speculating_server_gives_the_reference_greedy_tokens(launched: None,
                                                               factory: str) -> None:
    from engines.adapters.http import llama_variants
    from tests.helpers import alone, make_prompts

    eng = getattr(llama_variants, factory)()
    before = eng.exercised()
    prompts = [*make_prompts([3, 17, 40], seed=11), _repetitive(30, 1), _repetitive(12, 2)]
    requests = [Request(p, SamplingParams(max_tokens=n))
                for p, n in zip(prompts, [40, 25, 60, 40, 33], strict=True)]
    got = _served(eng, requests)
    want = alone(requests)
    for r in requests:
        assert got[r.request_id] == want[r.request_id], f"request {r.request_id}"
    after = eng.exercised()
    drafted = after["spec_draft_tokens"] - before["spec_draft_tokens"]
    accepted = after["spec_accepted_tokens"] - before["spec_accepted_tokens"]
    # Speculation was exercised, both ways: drafts accepted and drafts rejected.
    assert 0 < accepted < drafted, (drafted, accepted)


def test_bias_and_allowed_ids_on_llama_server(launched: None) -> None:
    from engines.adapters.http.llama_variants import llama_server_draft
    from engines.sequential import SequentialEngine
    from tests.helpers import make_prompts, run_tokens

    # On the speculating server: a bias must hold on drafted positions too.
    eng = llama_server_draft()
    (p, q) = make_prompts([6, 9], seed=3)
    requests = [Request(p, SamplingParams(max_tokens=12, logit_bias=((7, 100.0),))),
                Request(q, SamplingParams(max_tokens=12, logit_bias=((5, 3.0), (9, -1.5)),
                                          repetition_penalty=1.3)),
                Request(q, SamplingParams(max_tokens=12, allowed_token_ids=(1, 2, 3, 500)))]
    got = run_tokens(eng, requests)
    ref = run_tokens(SequentialEngine(), [Request(r.prompt_token_ids, r.params,
                                                  request_id=("ref", r.request_id))
                                          for r in requests])
    for r in requests:
        assert got[r.request_id] == ref[("ref", r.request_id)], f"request {r.request_id}"
    assert set(got[requests[0].request_id]) == {7}
    assert set(got[requests[2].request_id]) <= {1, 2, 3, 500}


def test_lora_per_request_on_llama_server(launched: None) -> None:
    from engines.adapters.http.llama_variants import llama_server_lora
    from engines.sequential import SequentialEngine
    from tests.helpers import make_prompts, run_tokens

    eng = llama_server_lora()
    names = sorted(eng.loras)
    assert len(names) == 3 and {"lora"} <= capabilities_of(eng).supported_sampling
    prompts = make_prompts([4, 11, 23], seed=7)
    requests = [Request(p, SamplingParams(max_tokens=16), lora=lora)
                for p in prompts for lora in (None, *names)]
    got = run_tokens(eng, requests)
    ref = run_tokens(SequentialEngine(loras=eng.loras),
                     [Request(r.prompt_token_ids, r.params, lora=r.lora,
                              request_id=("ref", r.request_id)) for r in requests])
    for r in requests:
        assert got[r.request_id] == ref[("ref", r.request_id)], f"{r.lora} {r.request_id}"
    # The adapters change greedy tokens (else the comparison above proves nothing).
    for i in range(0, len(requests), len(names) + 1):
        base = got[requests[i].request_id]
        assert any(got[requests[i + k].request_id] != base for k in range(1, len(names) + 1))


def test_children_on_llama_server(launched: None) -> None:
    from engines.adapters.http.llama_variants import llama_server_n
    from engines.protocol import FinishReason
    from tests.helpers import hf_generate

    eng = llama_server_n()

    def children(request: Request) -> tuple[dict[int, list[int]], dict[int, FinishReason]]:
        eng.add_request(request)
        toks: dict[int, list[int]] = {}
        fins: dict[int, FinishReason] = {}
        while eng.has_work():
            for o in eng.step():
                assert o.index not in fins, f"child {o.index} got an output after finishing"
                toks.setdefault(o.index, []).extend(o.token_ids)
                if o.finish_reason is not None:
                    fins[o.index] = o.finish_reason
        return toks, fins

    seeded = SamplingParams(max_tokens=5, n=3, temperature=1.0, seed=7, logprobs=1)
    toks, fins = children(Request((5, 6, 7), seeded))
    assert sorted(toks) == [0, 1, 2] and set(fins.values()) == {FinishReason.LENGTH}
    assert len({tuple(t) for t in toks.values()}) == 3  # sampled children differ
    assert children(Request((5, 6, 7), seeded))[0] == toks  # and are reproducible
    greedy, _ = children(Request((5, 6, 7), SamplingParams(max_tokens=5, n=2)))
    assert greedy == {0: hf_generate((5, 6, 7), 5), 1: hf_generate((5, 6, 7), 5)}
    # A stop id ends the child that reaches it (STOP) and no other.
    stop = toks[1][1]
    cut, fins = children(Request((5, 6, 7), SamplingParams(
        max_tokens=5, n=3, temperature=1.0, seed=7, stop_token_ids=(stop,))))
    assert cut[1] == toks[1][:2] and fins[1] is FinishReason.STOP
    assert all(cut[i] == toks[i][:toks[i].index(stop) + 1] if stop in toks[i] else
               cut[i] == toks[i] for i in (0, 2))
    # Aborted once child 1 has stopped: an ABORT for each child still running, none for it.
    eng.add_request(Request((5, 6, 7), SamplingParams(
        max_tokens=400, n=3, temperature=1.0, seed=7, stop_token_ids=(stop,)), request_id="a"))
    finished: set[int] = set()
    while 1 not in finished:
        finished |= {o.index for o in eng.step() if o.finish_reason is not None}
    eng.abort_request("a")  # type: ignore[attr-defined]
    aborted = []
    while eng.has_work():
        aborted += [o.index for o in eng.step() if o.finish_reason is FinishReason.ABORT]
    assert sorted(aborted) == sorted({0, 1, 2} - finished)


def test_a_base_request_after_an_adapter_reuses_its_prompt_kv(launched: None) -> None:
    """Pins docs/findings.md report 36 (llama.cpp, the class of #26207): on one slot with
    cache_prompt, a request without `lora` after one under an adapter reuses the prompt KV
    the adapter computed, and its tokens are not the base model's. This test fails once
    llama.cpp clears the slot's prompt on that change: then drop the pin and the note."""
    from engines.adapters.http.dialects import LlamaServer
    from engines.adapters.http.llama_variants import LlamaEngine, _lora_server, _vocab
    from tests.helpers import hf_generate, run_tokens

    server, loras = _lora_server(slots=1)
    name = sorted(loras)[0]
    dialect = LlamaServer(cache_prompt=True, vocab_size=_vocab(), loras={name: 0}, name="pin")
    eng = LlamaEngine(server.url, vocab_size=_vocab(), dialect=dialect, loras={name: loras[name]})
    prompt = tuple(range(100, 160))
    base = hf_generate(prompt, 6)
    params = SamplingParams(max_tokens=6)
    assert run_tokens(eng, [Request(prompt, params, request_id="cold")])["cold"] == base
    run_tokens(eng, [Request(prompt, params, lora=name, request_id="adapter")])
    after = run_tokens(eng, [Request(prompt, params, request_id="after")])["after"]
    assert after != base, "fixed upstream? a base request after an adapter's is the base model"


@pytest.mark.parametrize("host_cache", [True, False], ids=["cache-ram", "no-cache-ram"])
def test_the_host_prompt_cache_restores_kv_an_adapter_computed(launched: None,
                                                                host_cache: bool) -> None:
    """Pins docs/findings.md report 47: with the server's host-memory prompt cache on (its
    default), a slot's prompt KV saved when the slot went to other requests is restored for
    a base request over the same prompt, though an adapter computed it and the request lists
    every adapter at scale 0; the tokens are neither the base model's nor the adapter's.
    With `--cache-ram 0`, as llama_server_lora_cache_prompt launches it, they are the base
    model's. The first case fails once llama.cpp keys that cache by adapters too."""
    from engines.adapters.http.llama_variants import _engine, _lora_server
    from tests.helpers import hf_generate, make_prompts, run_tokens

    server, loras = _lora_server(host_cache=host_cache)
    eng = _engine(server, loras=loras, cache_prompt=True, name="pin-47")
    (prompt,) = make_prompts([35], seed=47)
    base = hf_generate(prompt, 3)
    params = SamplingParams(max_tokens=3)
    assert run_tokens(eng, [Request(prompt, params, request_id="cold")])["cold"] == base
    run_tokens(eng, [Request(prompt, params, lora=sorted(loras)[0], request_id="adapter")])
    # Four other prompts take every slot, so the adapter's prompt state leaves its slot.
    others = make_prompts([40, 40, 40, 40], seed=48)
    run_tokens(eng, [Request(p, SamplingParams(max_tokens=5), request_id=f"o{i}")
                     for i, p in enumerate(others)])
    after = run_tokens(eng, [Request(prompt, params, request_id="after")])["after"]
    if host_cache:
        assert after != base, "fixed upstream? the restored prompt KV is the base model's"
    else:
        assert after == base


def test_guided_requests_on_llama_server(launched: None) -> None:
    """llama_server_guided (the BPE GGUF): a choice ends on the grammar's EOS, finish STOP,
    its text one of the choices; a token whose text ends mid-character keeps its id (the
    requests are unstreamed: docs/findings.md report 43); an unguided request beside
    them runs to its budget."""
    from pathlib import Path

    from tokenizers import Tokenizer

    from engines.adapters.http.llama_variants import llama_server_guided
    from engines.protocol import FinishReason, Guided, capabilities_of
    from tests.helpers import drain

    eng = llama_server_guided()
    tok = Tokenizer.from_file(str(Path(capabilities_of(eng).tokenizer or "") / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    choices = ("你好", "世界")
    requests = [Request((1,), SamplingParams(max_tokens=8, guided=Guided("choice", choices))),
                Request((5, 6, 7), SamplingParams(max_tokens=8,
                                                  guided=Guided("choice", choices))),
                Request((1,), SamplingParams(max_tokens=2, logit_bias=((405, 100.0),)))]
    done = drain(eng, requests)
    tokens = {rid: got for rid, (got, _) in done.items()}
    finish = {rid: reason for rid, (_, reason) in done.items()}
    for r in requests[:2]:
        got = tokens[r.request_id]
        assert finish[r.request_id] == FinishReason.STOP and got[-1] == eos, got
        assert tok.decode(got[:-1]) in choices, got
    # 405 is "世" plus two bytes of the next character: its id must not be lost.
    assert tokens[requests[2].request_id][0] == 405
    assert len(tokens[requests[2].request_id]) == 2
    assert finish[requests[2].request_id] == FinishReason.LENGTH


def test_stop_strings_on_llama_server(launched: None) -> None:
    """llama_server_guided: a stop string ends the request at the token that completed it,
    its text cut before the stop (or after it, with include_stop_str_in_output), the tokens
    those of a request without the stop up to there."""
    from engines.adapters.http.llama_variants import llama_server_guided
    from engines.protocol import FinishReason, Request, SamplingParams

    eng = llama_server_guided()
    prompt = (5, 6, 7)
    plain = Request(prompt, SamplingParams(max_tokens=12), request_id="plain")
    cut = Request(prompt, SamplingParams(max_tokens=12, stop=("你好こ",)), request_id="cut")
    inc = Request(prompt, SamplingParams(max_tokens=12, stop=("你好こ",),
                                         include_stop_str_in_output=True), request_id="inc")
    for r in (plain, cut, inc):
        eng.add_request(r)
    tokens: dict[object, list[int]] = {}
    text: dict[object, str] = {}
    finish: dict[object, FinishReason] = {}
    while eng.has_work():
        for o in eng.step():
            tokens.setdefault(o.request_id, []).extend(o.token_ids)
            text[o.request_id] = text.get(o.request_id, "") + (o.text or "")
            if o.finish_reason is not None:
                finish[o.request_id] = o.finish_reason
    whole = text["plain"]
    assert "你好こ" in whole, whole  # the prompt's greedy text holds the stop (checked by hand)
    at = whole.index("你好こ")
    assert text["cut"] == whole[:at] and text["inc"] == whole[:at + 3]
    assert finish["cut"] == finish["inc"] == FinishReason.STOP
    assert tokens["cut"] == tokens["inc"] == tokens["plain"][:len(tokens["cut"])]
    assert len(tokens["cut"]) < len(tokens["plain"])
