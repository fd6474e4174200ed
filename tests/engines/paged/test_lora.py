"""The paged engine's LoRA: adapters and base requests batched in one forward, token-exact
with the PEFT reference; prefix keys by adapter (and which load of it) and cache salt;
adapters added and removed at run time."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch

from engines.loras import lora_dir, zoo_loras
from engines.paged import PagedEngine
from engines.paged.forward import Row
from engines.protocol import InvalidRequest, LoRAManagement, Request, SamplingParams, loras
from engines.sequential import SequentialEngine
from tests.helpers import run_tokens

pytest.importorskip("peft")


def _mix(names: Sequence[str], n: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    return [Request(tuple(rng.randrange(1024) for _ in range(rng.randrange(3, 60))),
                    SamplingParams(max_tokens=rng.randrange(1, 24)), request_id=f"r{i}",
                    lora=rng.choice([None, *names]), cache_salt=rng.choice([None, "a", "b"]))
            for i in range(n)]


def test_a_mix_of_adapters_and_base_is_one_forward_and_matches_peft() -> None:
    adapters = zoo_loras("tiny", 4)
    engine = PagedEngine("tiny", loras=adapters)
    assert isinstance(engine, LoRAManagement) and loras(engine) == adapters
    steps: list[set[int]] = []
    forward = engine.runner.forward

    def spy(rows: Sequence[Row]) -> torch.Tensor:
        steps.append({row.lora for row in rows})
        return forward(rows)

    engine.runner.forward = spy  # type: ignore[method-assign]
    requests = _mix(list(adapters), 12, seed=0)
    got = run_tokens(engine, requests)
    assert got == run_tokens(SequentialEngine("tiny", loras=adapters), requests)
    assert max(len(s) for s in steps) >= 3  # several adapters (and base) in one forward
    assert engine.exercised()["lora_tokens"] > 0


def test_prefix_blocks_are_shared_only_by_the_same_adapter_and_salt() -> None:
    adapters = zoo_loras("tiny", 2)
    a, b = adapters
    engine = PagedEngine("tiny", loras=adapters, max_num_batched_tokens=512)
    prompt = tuple(range(100, 150))  # 3 full blocks of 16
    first = Request(prompt, SamplingParams(max_tokens=40), request_id="first", lora=a,
                    cache_salt="s")
    engine.add_request(first)
    engine.step()  # its prompt computed and its blocks cached; it keeps decoding
    others = {"same": (a, "s"), "salt": (a, "t"), "nosalt": (a, None), "adapter": (b, "s"),
              "base": (None, "s")}
    for rid, (lora, salt) in others.items():
        engine.add_request(Request(prompt, SamplingParams(max_tokens=2), request_id=rid,
                                   lora=lora, cache_salt=salt))
    engine.step()
    tables = engine.kv_block_tables()
    held = set(tables["first"][:3])
    assert set(tables["same"][:3]) == held
    for rid in others.keys() - {"same"}:
        assert not held & set(tables[rid]), rid


def test_a_name_added_again_is_other_weights_and_never_its_old_blocks() -> None:
    engine = PagedEngine("tiny")
    with pytest.raises(InvalidRequest, match=r"^lora: 'x' is not an adapter"):
        engine.add_request(Request((1, 2, 3), request_id="r", lora="x"))
    prompt = tuple(range(200, 240))
    engine.add_lora("x", str(lora_dir("tiny", 0)))
    engine.add_request(Request(prompt, SamplingParams(max_tokens=4), request_id="r0", lora="x"))
    with pytest.raises(ValueError, match="in use"):
        engine.remove_lora("x")
    while engine.has_work():
        engine.step()
    engine.remove_lora("x")
    with pytest.raises(KeyError):
        engine.remove_lora("x")
    engine.add_lora("x", str(lora_dir("tiny", 1)))
    hits = engine.prefix_cache_hits
    got = run_tokens(engine, [Request(prompt, SamplingParams(max_tokens=8), request_id="r1",
                                lora="x")])
    assert engine.prefix_cache_hits == hits  # the first load's blocks are not this one's
    want = run_tokens(SequentialEngine("tiny", loras={"y": lora_dir("tiny", 1)}),
                [Request(prompt, SamplingParams(max_tokens=8), request_id="r1", lora="y")])
    assert got == want


def test_more_adapters_than_slots_are_refused() -> None:
    engine = PagedEngine("tiny", max_loras=1)
    engine.add_lora("a", str(lora_dir("tiny", 0)))
    with pytest.raises(ValueError, match="max_loras"):
        engine.add_lora("b", str(lora_dir("tiny", 1)))
    assert loras(engine) == {"a": str(lora_dir("tiny", 0))}
