"""engines.bench.shares: `batching-bench closed` gives each engine its share of its dtype's
ceiling, measured before and after the runs, or says per engine why it gives none. The GEMM
rate is replaced by fixed figures here, so the shares are exact and no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from engines.bench import draws, shares
from engines.bench.ceiling import GemmRate, Product, mix_flops
from engines.bench.doubles.fake import FakeEngine
from engines.models import PRESETS
from engines.protocol import Capabilities

RATES = {"float32": 100.0, "bfloat16": 200.0}  # GFLOP/s, the fixed rates of the fake timing


class _Bf16Fake(FakeEngine):
    def capabilities(self) -> Capabilities:
        return Capabilities(dtype="bfloat16")


def tiny_vocab() -> FakeEngine:
    """`--engine tests.bench.test_shares:tiny_vocab`: a fake on the tiny preset's vocab,
    declaring nothing (so compared at --dtype)."""
    return FakeEngine(vocab_size=1024, base_s=2e-4, prefill_s_per_token=2e-6)


def tiny_bf16() -> FakeEngine:
    return _Bf16Fake(vocab_size=1024, base_s=2e-4, prefill_s_per_token=2e-6)


def other_vocab() -> FakeEngine:
    return FakeEngine(vocab_size=1000, base_s=2e-4)


class _Fixed(Product):
    """A product whose sustained rate is RATES[dtype], noting each sample."""

    def __init__(self, dtype: str, asked: list[str]) -> None:
        super().__init__(f"fixed {dtype}", lambda: torch.zeros(()), 1.0)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "asked", asked)

    def sustained(self, seconds: float) -> float:
        self.asked.append(self.dtype)  # type: ignore[attr-defined]
        return RATES[self.dtype]  # type: ignore[attr-defined]


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Products sampled at RATES; the dtypes sampled, in order."""
    asked: list[str] = []

    def fixed(config: object, dtype: str, **_: object) -> tuple[Product, GemmRate]:
        return _Fixed(dtype, asked), GemmRate(RATES[dtype], f"fixed {dtype}")

    monkeypatch.setattr(shares, "best_product", fixed)
    return asked


def _items() -> list[draws.WorkItem]:
    return draws.closed_mix(vocab_size=1024)


def test_each_engine_is_compared_with_its_dtypes_ceiling(timed: list[str]) -> None:
    engines = {"fp32": tiny_vocab(), "bf16": tiny_bf16(), "other": other_vocab()}
    run = shares.CeilingRun.plan(engines, _items(), preset="tiny", device="cpu",
                                 dtype="float32")
    run.sample()
    run.sample()
    assert timed == ["float32", "bfloat16"] * 2  # one rate per dtype in use, each sample
    flops = mix_flops(PRESETS["tiny"].config, _items())
    for name, dtype in (("fp32", "float32"), ("bf16", "bfloat16")):
        ceiling = flops.output_tokens / (flops.total / (RATES[dtype] * 1e9))
        found = run.share(name, 1000.0)
        assert found is not None
        assert found.dtype == dtype
        assert found.ceiling_tokens_per_s == pytest.approx(ceiling)
        assert found.share == pytest.approx(1000.0 / ceiling)
    assert run.share("other", 1000.0) is None
    notes = run.notes({"fp32": 1000.0, "bf16": 1000.0, "other": 1000.0})
    assert any(line.startswith("bfloat16 ceiling:") for line in notes)
    assert any(line.startswith("other: no share") and "vocab 1000" in line for line in notes)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"enabled": False}, "off (--no-ceiling)"),
    ({"device": "cuda"}, "CPU cores only"),
    ({"preset": "tiny-moe"}, "mixture of 4 experts"),
    ({"preset": "/nonexistent"}, "neither a preset nor a directory"),
])
def test_no_ceiling_is_said_with_its_reason(timed: list[str], kwargs: dict[str, object],
                                            says: str) -> None:
    args: dict[str, object] = {"preset": "tiny", "device": "cpu", "dtype": "float32",
                               "enabled": True, **kwargs}
    run = shares.CeilingRun.plan({"fp32": tiny_vocab()}, _items(), **args)  # type: ignore[arg-type]
    run.sample()
    assert timed == []
    assert run.share("fp32", 1000.0) is None
    [note] = run.notes({"fp32": 1000.0})
    assert note.startswith("ceiling: not measured") and says in note


def test_an_undeclared_engine_takes_the_runs_dtype(timed: list[str]) -> None:
    run = shares.CeilingRun.plan({"fake": tiny_vocab()}, _items(), preset="tiny",
                                 device="cpu", dtype="bfloat16")
    assert run.dtypes == {"fake": "bfloat16"}
    run = shares.CeilingRun.plan({"fake": tiny_vocab()}, _items(), preset="tiny",
                                 device="cpu", dtype="float16")
    assert "dtype float16 (not declared: --dtype's)" in run.skipped["fake"]


ENGINES = ("--engine", "fp32=tests.bench.test_shares:tiny_vocab",
           "--engine", "bf16=tests.bench.test_shares:tiny_bf16")
RUN = ("closed", "--no-hf", "--warmup", "0", "--runs", "2", "--no-progress", *ENGINES)


def test_closed_prints_each_engines_share(tmp_path: Path, timed: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    assert cli.main([*RUN, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert timed == ["float32", "bfloat16"] * 3  # after the warm-ups and each recorded run
    table = pd.read_csv(tmp_path / "closed.csv")
    assert list(table["ceiling_dtype"]) == ["float32", "bfloat16"]
    assert list(table["ceiling_share"]) == pytest.approx(
        list(table["output_tokens_per_s"] / table["ceiling_tokens_per_s"]), rel=1e-4)  # CSV's
    assert table["ceiling_tokens_per_s"][1] == pytest.approx(
        2 * table["ceiling_tokens_per_s"][0], rel=1e-4)
    for row in table.itertuples():
        line = next(x for x in printed.splitlines() if x.startswith(f"{row.engine}: "))
        assert line.endswith(f"% of the {row.ceiling_dtype} ceiling"), line


def test_no_ceiling_leaves_no_columns_and_says_so(tmp_path: Path, timed: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from engines.bench import cli

    assert cli.main([*RUN, "--no-ceiling", "--out", str(tmp_path)]) == 0
    assert "ceiling: not measured, off (--no-ceiling)" in capsys.readouterr().out
    assert timed == []
    assert not any(c.startswith("ceiling") for c in pd.read_csv(tmp_path / "closed.csv"))


def test_the_zoos_bf16_pair_is_compared_with_the_bf16_ceiling(timed: list[str]) -> None:
    from engines import zoo

    engines = {"paged": zoo.paged_tiny_nopc_compiled_b256(),
               "paged_bf16": zoo.paged_tiny_nopc_compiled_b256_bf16()}
    run = shares.CeilingRun.plan(engines, _items(), preset="tiny", device="cpu",
                                 dtype="float32")
    assert run.dtypes == {"paged": "float32", "paged_bf16": "bfloat16"}
