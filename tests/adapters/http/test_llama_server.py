"""llama.cpp's real llama-server behind the HTTP adapter: the GGUF conversion, limits from
/props, greedy tokens against transformers' generate with requests arriving mid-run, abort
(the slot is freed), logprobs against the reference, and the server's own refusals.

Runs only where BATCHING_LLAMA_SERVER names the binary (bash ci/llama-server-env.sh builds
it; ci/test-third-party.sh sets it under ALL_VARIANTS), skipped visibly elsewhere. One test,
so that one server serves it (under xdist each worker would launch its own)."""

from __future__ import annotations

import os
import time

import pytest

httpx = pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")

from engines.adapters.http.launch import running  # noqa: E402
from engines.adapters.http.servers import LLAMA_SERVER  # noqa: E402
from engines.protocol import (  # noqa: E402
    FinishReason,
    InvalidRequest,
    Request,
    SamplingParams,
    StepOutput,
    capabilities_of,
)

pytestmark = pytest.mark.skipif(
    not os.environ.get(LLAMA_SERVER),
    reason=f"{LLAMA_SERVER} does not name a llama-server binary (bash ci/llama-server-env.sh "
           "builds one; ci/test-third-party.sh sets it under ALL_VARIANTS): the real "
           "llama-server tests did not run")



def busy_slots(url: str) -> int:
    return sum(bool(s["is_processing"]) for s in httpx.get(url + "/slots", timeout=5).json())


def mid_run_arrivals_get_generate_tokens(eng: object) -> None:
    """Two greedy requests, then two more added after the first step, while the first two
    (or one of them) are still decoding (budgets long enough on a server that streams a token in
    milliseconds): each gets transformers' generate tokens alone, finishing with LENGTH."""
    from tests.helpers import drain, greedy, hf_generate, make_prompts

    # The early two's budgets fill most of a 512-token slot: at 150-200 tokens, a quiet core's
    # server finished one of them within the first step() about one run in ten.
    requests = greedy(make_prompts([3, 70, 1, 200], seed=5), [500, 440, 1, 4])
    early, late = requests[:2], requests[2:]
    unfinished: list[int] = []

    def arrive(step: int, outputs: list[StepOutput]) -> None:
        if step == 0:
            done = {o.request_id for o in outputs if o.finish_reason is not None}
            unfinished.append(sum(r.request_id not in done for r in early))
            for r in late:
                eng.add_request(r)  # type: ignore[attr-defined]

    got = drain(eng, early, on_step=arrive)  # type: ignore[arg-type]
    # At least one still decoding is a mid-run arrival: a quiet core's server finished one of
    # the early two within the first step() in 3 of 9 runs (the budgets cannot grow: the slot
    # holds 512 tokens).
    assert unfinished[0] >= 1, "the first two finished before the others arrived"
    for r in requests:
        assert got[r.request_id] == (hf_generate(r.prompt_token_ids, r.params.max_tokens),
                                     FinishReason.LENGTH), f"request {r.request_id}"


def test_on_llama_server(launched: None) -> None:
    from engines.adapters.http import llama_server
    from engines.adapters.http.convert import gguf_model
    from engines.adapters.http.servers import llama_server_binary
    from tests.helpers import assert_top_logprobs_match_the_reference, hf_generate, make_prompts

    eng = llama_server()
    # Limits from /props: 4 slots of the preset's 512 tokens.
    assert (eng.vocab_size, eng.max_model_len) == (1024, 512)
    assert capabilities_of(eng).max_concurrency == 4
    start = time.monotonic()
    assert gguf_model(binary=llama_server_binary()).is_file()
    assert time.monotonic() - start < 5  # converted once, cached
    mid_run_arrivals_get_generate_tokens(eng)
    again = llama_server()
    assert again.url == eng.url and len(running()) == 1  # one server per process
    # Abort mid-run (a budget long enough to be running still): one ABORT output, the other
    # request unaffected, and the closed stream frees the slot on the server.
    (prompt,) = make_prompts([5], seed=2)
    for attempt in range(3):  # on a quiet core the server can finish 400 tokens in one step
        victim, other = f"victim{attempt}", f"other{attempt}"
        again.add_request(Request(prompt, SamplingParams(max_tokens=400), request_id=victim))
        again.add_request(Request(prompt, SamplingParams(max_tokens=5), request_id=other))
        first = again.step()
        if all(o.finish_reason is None for o in first if o.request_id == victim):
            break
        while again.has_work():
            again.step()
    else:
        raise AssertionError("the 400-token request finished within one step() three times: "
                             "abort was never exercised mid-run")
    again.abort_request(victim)
    rest = []
    while again.has_work():
        rest += again.step()
    assert [o.finish_reason for o in rest if o.request_id == victim] == [FinishReason.ABORT]
    others = [t for o in first + rest if o.request_id == other for t in o.token_ids]
    assert others == hf_generate(prompt, 5)
    deadline = time.monotonic() + 10
    while busy_slots(eng.url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert busy_slots(eng.url) == 0  # the closed stream freed the aborted request's slot
    # A prompt past a slot's context, with the adapter told a larger one than the server has:
    # the server's own refusal is an InvalidRequest with its message.
    eng.max_model_len = 1024
    with pytest.raises(InvalidRequest, match="refused request"):
        eng.add_request(Request(tuple(range(600)), SamplingParams(max_tokens=2)))
    eng.max_model_len = 512
    assert not eng.has_work()
    # Logprobs (n_probs: the raw distribution's), against the reference.
    (prompt,) = make_prompts([9], seed=4)
    ours = assert_top_logprobs_match_the_reference(
        eng, prompt, SamplingParams(max_tokens=5, logprobs=3))
    assert ours[-1].finish_reason is FinishReason.LENGTH
    assert sum(len(o.token_ids) for o in ours) == 5
