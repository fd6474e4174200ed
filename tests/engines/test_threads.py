"""engines.threads: the bench's --threads reaches the engines built in its process, a bad
value is refused by name, and our engines state the threads they compute with."""

from __future__ import annotations

import os

import pytest
import torch

from engines.threads import THREADS_ENV, available_cores, engine_threads, torch_threads


def test_engine_threads_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert engine_threads() == available_cores() >= 1
    monkeypatch.setenv(THREADS_ENV, "3")
    assert engine_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"{THREADS_ENV}: expected a positive integer, "
                                             f"got '{bad}'"):
            engine_threads()


def test_torch_engines_count_torch_threads() -> None:
    assert torch_threads("cpu") == torch.get_num_threads()
    assert torch_threads("cuda") is None  # a GPU computes the steps, not these threads


def test_the_bench_exports_its_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from engines.bench import cli

    monkeypatch.delenv(THREADS_ENV, raising=False)
    before = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit):  # a usage error after the threads are set
            cli.main(["closed", "--threads", "1", "--runs", "0"])
        assert os.environ[THREADS_ENV] == "1"
    finally:
        torch.set_num_threads(before)
