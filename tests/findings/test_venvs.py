"""Where the scripts run: the pinned venv as ci/<venv>-env.sh prints it (or its SKIP reason),
and what a release venv installs. Nothing here builds a venv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engines.findings import venvs
from engines.findings.ledger import Entry


def entry(venv: str = "fake", needs: tuple[str, ...] = (), library: str = "pytest") -> Entry:
    return Entry(Path("r05_x.py"), 5, library, venv, (), None, needs)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "ci").mkdir()
    monkeypatch.setattr(venvs, "REPO", tmp_path)
    return tmp_path


def test_the_pinned_python_is_the_env_scripts_last_line(repo: Path) -> None:
    (repo / "ci" / "fake-env.sh").write_text(
        f'echo "fake-env: reusing" >&2\necho noise\necho "{sys.executable}"\n')
    found = venvs.pinned(entry())
    assert found.python == Path(sys.executable) and found.why == ""
    assert found.version == venvs.library_version(Path(sys.executable), "pytest") is not None


def test_an_env_script_that_skips_gives_its_reason(repo: Path) -> None:
    (repo / "ci" / "fake-env.sh").write_text(
        'echo "SKIP fake: no python3.11 interpreter to build .venv-fake with" >&2\nexit 0\n')
    found = venvs.pinned(entry())
    assert found.python is None
    assert found.why == "SKIP fake: no python3.11 interpreter to build .venv-fake with"


def test_a_failing_env_script_and_a_missing_one(repo: Path) -> None:
    (repo / "ci" / "fake-env.sh").write_text('echo "pip: no such wheel" >&2\nexit 3\n')
    assert venvs.pinned(entry()).why == "ci/fake-env.sh failed: pip: no such wheel"
    assert venvs.pinned(entry("other")).why.startswith("no ci/other-env.sh")


def test_a_tool_venv_runs_the_project_python_with_the_tool(repo: Path) -> None:
    tool = repo / "cache" / "llama-server-0.3.36" / "bin" / "llama-server"
    tool.parent.mkdir(parents=True)
    tool.write_text("")
    (repo / "ci" / "llama-server-env.sh").write_text(f'echo "{tool}"\n')
    found = venvs.pinned(entry("llama-server", library="llama.cpp"))
    assert found.python == venvs.main_python() and found.tool == tool
    assert found.version == "llama-cpp-python 0.3.36"


def test_newest_version_from_pip_output() -> None:
    out = ("WARNING: Location 'file:///opt/x/' is ignored\nctranslate2 (4.9.0)\n"
           "Available versions: 4.9.0, 4.8.5\n")
    assert venvs.parse_newest(out) == "4.9.0"
    assert venvs.parse_newest("ERROR: No matching distribution found for nothing\n") is None


def test_a_release_venv_installs_torch_first_and_only_what_the_ledger_needs() -> None:
    torch, packages = venvs.requirements(entry(needs=("transformers>=5", "torch")), "4.9.0")
    assert torch == [venvs.torch_pin()]
    assert packages == ["pytest==4.9.0", "numpy", venvs.torch_pin(), "transformers>=5"]
    assert venvs.requirements(entry(), "4.9.0") == ([], ["pytest==4.9.0", "numpy"])


def test_release_venvs_of_other_needs_do_not_share_a_folder() -> None:
    plain = venvs.release_dir(entry(), "1.0")
    assert plain.name == "pytest-1.0" and plain.parent == venvs.cache_dir()
    assert venvs.release_dir(entry(needs=("transformers",)), "1.0") != plain
