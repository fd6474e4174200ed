"""A tool venv's newest release: llama-server is built from llama-cpp-python's sdist, so the
newest release asked of the index is that package's; where it is the pinned build's, the
pinned result stands for it, as for a library whose pin is the newest."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.findings import venvs
from engines.findings.check import Checker
from engines.findings.ledger import Entry
from engines.findings.run import Outcome, Result

ENTRY = Entry(Path("r35_x.py"), 35, "llama.cpp", "llama-server", ("tiny",), None,
              args=("--server-bin", "{server}"))


@pytest.mark.parametrize(("newest", "is_pin"), [("0.3.36", True), ("0.3.40", False)])
def test_the_newest_llama_server_is_llama_cpp_pythons(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, newest: str, is_pin: bool) -> None:
    asked: list[str] = []

    def newest_version(library: str, python: Path | None = None) -> str:
        asked.append(library)
        return newest

    checker = Checker(tmp_path, say=lambda _: None)
    monkeypatch.setattr(venvs, "newest_version", newest_version)
    monkeypatch.setattr(checker, "pinned", lambda entry: venvs.Interpreter(
        Path("python"), "llama-cpp-python 0.3.36"))
    monkeypatch.setattr(checker, "run", lambda entry, where: Result(
        Outcome.REPRODUCES, "", where.version))
    done = checker.check(ENTRY)
    assert asked == ["llama-cpp-python"]
    assert done.newest is not None
    if is_pin:
        assert done.newest_is_pin and done.newest.outcome is Outcome.REPRODUCES
        assert done.newest_cell() == ("reproduces on llama-cpp-python 0.3.36 (the pin is the "
                                      "newest)")
    else:
        assert done.newest.outcome is Outcome.CANNOT_RUN
        assert "newest: llama-cpp-python 0.3.40" in done.newest.why
