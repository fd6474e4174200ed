"""Planted LoRA and tenant bugs in the paged engine, each caught by a probe that passes on
the correct engine: parity with the PEFT reference over a mix of adapters, base requests and
salts; prefix blocks shared only by the same adapter and salt (and shared there); an adapter
removed and another added in its slot."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from engines.loras import lora_dir, zoo_loras
from engines.paged import PagedEngine
from engines.protocol import Request, SamplingParams
from engines.sequential import SequentialEngine
from tests.helpers import run_tokens
from tests.planted.lora_bugs import (
    BaseRowsGetADelta,
    KeyIgnoresAdapter,
    SaltIgnored,
    ScalingTwice,
    SlotReused,
    StaleIndex,
    TenantsNeverCached,
)

pytest.importorskip("peft")


def parity_probe(make: Callable[..., PagedEngine]) -> str | None:
    """A mix of 4 adapters, base requests and salts (more requests than seats, so seats
    change hands) against the PEFT reference; the first divergence, or None."""
    adapters = zoo_loras("tiny", 4)
    rng = random.Random(1)
    requests = [Request(tuple(rng.randrange(1024) for _ in range(rng.randrange(3, 40))),
                        SamplingParams(max_tokens=rng.randrange(1, 16)), request_id=f"r{i}",
                        lora=rng.choice([None, *adapters]),
                        cache_salt=rng.choice([None, "a", "b"])) for i in range(14)]
    got = run_tokens(make(loras=adapters, max_batch_size=4, max_num_batched_tokens=64), requests)
    want = run_tokens(SequentialEngine("tiny", loras=adapters), requests)
    bad = [r.request_id for r in requests if got[r.request_id] != want[r.request_id]]
    return f"diverged from PEFT: {bad}" if bad else None


def isolation_probe(make: Callable[..., PagedEngine]) -> str | None:
    """Requests on one prompt while its first is still running: a block shared with another
    adapter or salt is a leak; none shared with the same adapter and salt caches nothing."""
    adapters = zoo_loras("tiny", 2)
    a, b = adapters
    engine = make(loras=adapters, max_num_batched_tokens=512)
    prompt = tuple(range(100, 150))
    engine.add_request(Request(prompt, SamplingParams(max_tokens=40), request_id="first",
                               lora=a, cache_salt="s"))
    engine.step()
    others = {"same": (a, "s"), "salt": (a, "t"), "nosalt": (a, None), "adapter": (b, "s"),
              "base": (None, "s")}
    for rid, (lora, salt) in others.items():
        engine.add_request(Request(prompt, SamplingParams(max_tokens=2), request_id=rid,
                                   lora=lora, cache_salt=salt))
    engine.step()
    tables = engine.kv_block_tables()
    held = set(tables["first"])
    leaks = [rid for rid in others.keys() - {"same"} if held & set(tables[rid])]
    if leaks:
        return f"blocks shared across adapter or salt with {sorted(leaks)}"
    return None if held & set(tables["same"]) else "no block shared by the same adapter/salt"


def reuse_probe(make: Callable[..., PagedEngine]) -> str | None:
    """Adapter 0 served, removed; adapter 1 added (into the freed slot) and served: its tokens
    must be adapter 1's (PEFT's)."""
    engine = make()
    prompt = tuple(range(300, 330))
    engine.add_lora("x", str(lora_dir("tiny", 0)))
    run_tokens(engine, [Request(prompt, SamplingParams(max_tokens=6), request_id="0", lora="x")])
    engine.remove_lora("x")
    engine.add_lora("y", str(lora_dir("tiny", 1)))
    got = run_tokens(engine, [Request(prompt, SamplingParams(max_tokens=6), request_id="1",
                                lora="y")])
    want = run_tokens(SequentialEngine("tiny", loras={"y": lora_dir("tiny", 1)}),
                [Request(prompt, SamplingParams(max_tokens=6), request_id="1", lora="y")])
    return None if got == want else f"served {got['1']}, PEFT {want['1']}"


PROBES = {"parity": parity_probe, "isolation": isolation_probe, "reuse": reuse_probe}
PLANTED: dict[type[PagedEngine], str] = {
    ScalingTwice: "parity", BaseRowsGetADelta: "parity", StaleIndex: "parity",
    KeyIgnoresAdapter: "isolation", SaltIgnored: "isolation", TenantsNeverCached: "isolation",
    SlotReused: "reuse"}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_no_false_alarm_on_the_correct_engine(probe: str) -> None:
    assert PROBES[probe](PagedEngine) is None


@pytest.mark.parametrize("planted", list(PLANTED), ids=[c.__name__ for c in PLANTED])
def test_each_planted_bug_is_caught(planted: type[PagedEngine]) -> None:
    assert PROBES[PLANTED[planted]](planted) is not None
