"""Third-party engines in the bench: described from what they report, never from --preset or
--max-batch-size; the SLO line says where its targets came from; --help tells the truth."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from engines.bench import cli
from engines.bench.config import DEFAULT_ENGINES
from engines.bench.describe import describe
from engines.bench.doubles.fake import FakeEngine
from engines.protocol import Capabilities, Request, StepOutput


class _Wrapped:
    """A protocol engine over a FakeEngine, without its slot introspection."""

    def __init__(self, vocab_size: int, max_model_len: int) -> None:
        self._inner = FakeEngine(max_batch_size=3, base_s=2e-4, vocab_size=vocab_size,
                                 max_model_len=max_model_len)
        self.vocab_size, self.max_model_len = vocab_size, max_model_len

    def add_request(self, request: Request) -> None:
        self._inner.add_request(request)

    def step(self) -> list[StepOutput]:
        return self._inner.step()

    def has_work(self) -> bool:
        return self._inner.has_work()


class _Declared(_Wrapped):
    compute_threads = 2  # the bench's own declarations (engines.bench.declarations)
    execution = "a library on CPU"

    def capabilities(self) -> Capabilities:
        return Capabilities(max_concurrency=3)


def declared() -> _Declared:
    """`--engine tests.bench.test_describe:declared`: says it runs 3 requests at once."""
    return _Declared(vocab_size=700, max_model_len=300)


def opaque() -> _Wrapped:
    """Says nothing about its concurrency."""
    return _Wrapped(vocab_size=800, max_model_len=256)


def slotted() -> FakeEngine:
    """SlotIntrospection with 4 slots (the issue's 4-slot engine)."""
    return FakeEngine(max_batch_size=4, base_s=2e-4, vocab_size=900, max_model_len=320)


def test_an_engine_is_described_from_what_it_reports() -> None:
    assert describe("s", slotted()).line() == (
        "s: vocab 900, context 320, 4 requests at once (max_batch_size, SlotIntrospection), "
        "compute threads unknown (no compute_threads)")
    assert describe("d", declared()).line() == (
        "d: vocab 700, context 300, 3 requests at once (max_concurrency), 2 compute threads, "
        "a library on CPU")
    assert describe("o", opaque()).line() == (
        "o: vocab 800, context 256, concurrency unknown (no SlotIntrospection, no "
        "max_concurrency), compute threads unknown (no compute_threads)")


def test_our_engines_state_their_threads_and_unequal_ones_are_said() -> None:
    from engines.bench.describe import unequal_threads
    from engines.paged.engine import PagedEngine

    ours = describe("paged", PagedEngine())
    assert ours.threads == torch.get_num_threads() and "eager on cpu" in ours.execution
    assert f"{ours.threads} compute thread" in ours.line()
    engines = {"paged": ours, "d": describe("d", declared())}
    if ours.threads == 2:
        assert unequal_threads(engines) == ""
    else:
        assert "compute threads differ or are unknown (paged" in unequal_threads(engines)
    engines["o"] = describe("o", opaque())
    assert "o unknown" in unequal_threads(engines) and "not at equal cores" in unequal_threads(
        engines)


def test_a_third_party_run_says_what_it_ran_and_where_the_slo_came_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--quick", "--requests", "24", "--warmup", "0", "--runs", "2", "--iterations",
            "2", "--out", str(tmp_path), "--no-progress", "--no-plots",
            "--engine", "four=tests.bench.test_describe:slotted",
            "--engine", "declared=tests.bench.test_describe:declared",
            "--engine", "opaque=tests.bench.test_describe:opaque"]
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    err, out = captured.err, captured.out
    assert "3 engines" in err and "timed in wall time (--clock wall)" in err
    assert "times: wall time (--clock wall)" in out  # they may compute off this thread
    assert "four: vocab 900, context 320, 4 requests at once" in err
    assert "declared: vocab 700, context 300, 3 requests at once (max_concurrency)" in err
    assert "opaque: vocab 800, context 256, concurrency unknown" in err
    # Nothing from --preset or --max-batch-size is said of them: that was the issue's
    # "preset tiny ... 8 slots" banner for a 4-slot engine on another model.
    assert "8 slots" not in err and "do not configure them" in err
    assert "SLO targets: timed on preset tiny" in err and "not on the engines under test" in err
    slo_lines = [line for line in out.splitlines() if line.lstrip().startswith(
        ("SLO:", "targets from", "each probe", "measured on"))]
    text = "\n".join(slo_lines)
    assert "targets from tiny float32 on cpu, transformers forward" in text
    # Third-party engines on a CPU, --quick or not: the wall-clock core, targets timed once.
    assert "timed once before the run" in text and "noisy-host kit: off" in out
    assert ("measured on preset tiny, not on the engines under test (four, declared, opaque): "
            "for targets of their own, set --slo-ttft and --slo-itl") in text


def test_given_targets_are_said_to_be_given(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--quick", "--requests", "24", "--warmup", "0", "--runs", "2", "--iterations",
            "1", "--out", str(tmp_path), "--no-progress", "--no-plots", "--slo-ttft", "0.05",
            "--slo-itl", "0.01", "--engine", "four=tests.bench.test_describe:slotted"]
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    assert "SLO targets: given (--slo-ttft, --slo-itl)" in captured.err
    assert "SLO: TTFT <= 50 ms and mean ITL <= 10 ms" in captured.out
    assert "targets given (--slo-ttft, --slo-itl): the same in every round" in captured.out
    assert "transformers forward" not in captured.out


def test_help_names_the_engines_that_run_by_default_and_the_quick_runtime(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "static vs continuous" not in text
    assert f"default engines ({', '.join(DEFAULT_ENGINES)})" in text
    assert "--slo-ttft" in text and "--slo-itl" in text
    # A measured figure, with the load it was measured under (not a promise).
    assert "measured" in text and re.search(r"\d+ s wall on 2 cores", text), text
