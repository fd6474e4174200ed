"""The zoo's seeded LoRA adapters (engines.loras) and the sequential reference serving them
through PEFT: each adapter changes greedy tokens, base requests are untouched, names are
checked at add_request and by LoRAManagement."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path

import pytest

from engines.loras import MAX_ZOO_LORAS, lora_dir, lora_spec, zoo_loras
from engines.protocol import InvalidRequest, LoRAManagement, Request, SamplingParams, loras
from engines.sequential import SequentialEngine

pytest.importorskip("peft")

PROMPT = tuple(range(5, 40))


def _run(engine: object, requests: Sequence[Request]) -> dict[Hashable, list[int]]:
    for r in requests:
        engine.add_request(r)  # type: ignore[attr-defined]
    out: dict[Hashable, list[int]] = {}
    while engine.has_work():  # type: ignore[attr-defined]
        for o in engine.step():  # type: ignore[attr-defined]
            out.setdefault(o.request_id, []).extend(o.token_ids)
    return out


def _greedy(lora: str | None, rid: str) -> Request:
    return Request(PROMPT, SamplingParams(max_tokens=8), request_id=rid, lora=lora)


def test_adapters_are_peft_directories_with_seeded_non_zero_weights() -> None:
    from safetensors.torch import load_file

    path = lora_dir("tiny", 1)
    config = json.loads((path / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == lora_spec(1).rank == 4
    assert {"q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"} <= set(config["target_modules"])
    weights = load_file(str(path / "adapter_model.safetensors"))
    assert all(w.abs().max() > 0 for w in weights.values())  # lora_B too: not PEFT's zeros
    assert lora_dir("tiny", 1) == path  # built once


def test_every_zoo_adapter_changes_greedy_tokens_and_base_requests_are_untouched() -> None:
    adapters = zoo_loras("tiny", MAX_ZOO_LORAS)
    engine = SequentialEngine("tiny", loras=adapters)
    assert loras(engine) == adapters and isinstance(engine, LoRAManagement)
    got = _run(engine, [_greedy(None, "base")] + [_greedy(n, n) for n in adapters])
    plain = _run(SequentialEngine("tiny"), [_greedy(None, "plain")])
    assert got["base"] == plain["plain"]
    streams = [tuple(got[n]) for n in adapters]
    assert all(s != tuple(plain["plain"]) for s in streams)
    assert len(set(streams)) == len(streams)  # and differ from each other


def test_unknown_adapter_refused_naming_the_field() -> None:
    engine = SequentialEngine("tiny", loras=zoo_loras("tiny", 1))
    with pytest.raises(InvalidRequest, match=r"^lora: 'nope' is not an adapter"):
        engine.add_request(_greedy("nope", "x"))
    assert not engine.has_work()


def test_add_and_remove_at_run_time() -> None:
    a, b = zoo_loras("tiny", 2)
    engine = SequentialEngine("tiny")
    with pytest.raises(KeyError):
        engine.remove_lora(a)
    engine.add_lora(a, str(lora_dir("tiny", 0)))
    engine.add_request(_greedy(a, "r"))
    with pytest.raises(ValueError, match="in use"):
        engine.remove_lora(a)
    with pytest.raises(ValueError, match="already served"):
        engine.add_lora(a, str(lora_dir("tiny", 0)))
    while engine.has_work():
        engine.step()
    engine.remove_lora(a)
    assert loras(engine) == {}
    # The name again, other weights: served as the new ones.
    engine.add_lora(a, str(lora_dir("tiny", 1)))
    reused = _run(engine, [_greedy(a, "again")])["again"]
    direct = _run(SequentialEngine("tiny", loras={b: lora_dir("tiny", 1)}), [_greedy(b, "d")])
    assert reused == direct["d"]


def test_a_bad_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a PEFT adapter directory"):
        SequentialEngine("tiny", loras={"x": str(tmp_path)})
