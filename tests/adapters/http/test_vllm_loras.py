"""vLLM's OpenAI server serving the zoo's LoRA adapters and cache salts behind the HTTP adapter
(engines.adapters.http.variants:vllm_server_loras): a request's adapter gives the PEFT
reference's greedy tokens, base requests batched beside adapters keep the base model's, and
the prefix cache is parted by adapter and salt (the server's own hit count, /metrics).

Runs only where BATCHING_VLLM_PYTHON names the vLLM venv's python (ci/vllm-env.sh builds it;
ci/test-third-party.sh sets it), skipped visibly elsewhere. One test, so that one server is
launched."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("httpx", reason="httpx (the optional extra `http`) is not installed")
pytest.importorskip("peft", reason="peft not installed (the reference's LoRA)")

from engines.adapters.http.servers import VLLM_PYTHON  # noqa: E402
from engines.protocol import (  # noqa: E402
    InvalidRequest,
    LoRAManagement,
    Request,
    SamplingParams,
    capabilities_of,
)
from tests.helpers import make_prompts, run_tokens  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.environ.get(VLLM_PYTHON),
    reason=f"{VLLM_PYTHON} does not name the python of a vLLM venv (bash ci/vllm-env.sh "
           "builds .venv-vllm; ci/test-third-party.sh sets it): the real-server LoRA test "
           "did not run")


def _hits(engine: object) -> int:
    """The server's prefix-cache hit tokens so far, once the count has settled (its /metrics
    may be updated a moment after a request's last message)."""
    read = engine.exercised  # type: ignore[attr-defined]
    last = read()["prefix_cache_hit_tokens"]
    for _ in range(50):
        time.sleep(0.2)
        now = read()["prefix_cache_hit_tokens"]
        if now == last:
            return int(now)
        last = now
    return int(last)


def test_loras_and_salts_on_vllms_openai_server(launched: None) -> None:
    from engines.adapters.http.variants import vllm_server_loras
    from engines.zoo import sequential_with_loras

    eng = vllm_server_loras()
    names = sorted(eng.loras)
    assert len(names) == 3
    assert {"lora", "cache_salt"} <= capabilities_of(eng).supported_sampling
    assert not isinstance(eng, LoRAManagement)  # declared: the module says why
    ref = sequential_with_loras()
    assert {n: ref.loras[n] for n in names} == eng.loras  # the same PEFT directories

    # Base rows beside all three adapters, batched (the mix that needs report 37's spare
    # slot), each against the reference alone.
    prompts = make_prompts([9, 40, 5], seed=3)
    requests = [Request(prompts[i % 3], SamplingParams(max_tokens=8), request_id=f"l{i}",
                        lora=[None, *names][i % 4]) for i in range(8)]
    theirs = run_tokens(eng, requests)
    for r in requests:
        assert theirs[r.request_id] == run_tokens(ref, [r])[r.request_id], r.lora
    # The adapter bit: the same prompt under an adapter and under none differ.
    assert theirs["l0"] != theirs["l6"]
    with pytest.raises(InvalidRequest, match="^lora: 'nope'"):
        eng.add_request(Request(prompts[0], SamplingParams(max_tokens=2), lora="nope"))
    assert not eng.has_work()

    # The prefix cache, parted by tenant: a repeat of a 70-token prompt (two whole 32-token
    # blocks) hits both blocks under the same adapter and salt, none under another.
    def hits(first: tuple[str | None, str | None], second: tuple[str | None, str | None],
             seed: int) -> int:
        (prompt,) = make_prompts([70], seed=seed)  # a prompt of its own: nothing cached yet
        before = _hits(eng)
        for i, (lora, salt) in enumerate((first, second)):
            run_tokens(eng, [Request(prompt, SamplingParams(max_tokens=2),
                                     request_id=f"s{seed}-{i}", lora=lora, cache_salt=salt)])
        return _hits(eng) - before

    a = names[0]
    assert hits((None, None), (None, None), 40) == 64  # the control: the server caches
    assert hits((None, "t1"), (None, "t1"), 41) == 64
    assert hits((a, "t1"), (a, "t1"), 42) == 64
    assert hits((None, "t1"), (None, "t2"), 43) == 0
    assert hits((None, None), (None, "t1"), 44) == 0
    assert hits((None, None), (a, None), 45) == 0
    assert hits((a, None), (names[1], None), 46) == 0
