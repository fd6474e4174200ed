"""`python -m engines.findings` end to end on fake scripts (the standard library only, in this
project's venv, "main"), so that no library's venv is built: list, check --write, --gate."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from engines.findings.check import Checked, gate
from engines.findings.cli import main
from engines.findings.ledger import Entry
from engines.findings.run import Outcome, Result
from engines.findings.table import Row, parse_rows

DOC = """# Findings

Intro.

## Reports

### 1. pytest: a fake report that reproduces

### 2. pytest: a fake report that is fixed

### 3. pytest: a fake report without a script
"""


def fake(folder: Path, number: int, verdict: str, status: int,
         upstream: str = "not filed") -> None:
    (folder / f"r{number:02d}_pytest_fake.py").write_text(f'''"""Fake report {number}."""

LEDGER = {{"report": {number}, "library": "pytest", "venv": "main", "presets": [],
          "workaround": "nothing of ours", "upstream": "{upstream}"}}

import sys  # noqa: E402

print("RESULT: {verdict}")
sys.exit({status})
''')


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    fake(tmp_path / "scripts", 1, "reproduces", 1)
    fake(tmp_path / "scripts", 2, "fixed", 0)
    (tmp_path / "findings.md").write_text(DOC)
    return tmp_path


def cli(repo: Path, *args: str) -> int:
    return main(["--scripts", str(repo / "scripts"), "--findings", str(repo / "findings.md"),
                 *args])


def test_list_shows_the_reports_without_a_script(repo: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(repo, "list") == 0
    out = capsys.readouterr().out
    assert "r01_pytest_fake.py [main]" in out
    assert "2 of 3 reports have a script; none yet: 3" in out


def test_check_writes_the_table_and_the_gate_holds_it(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = str(repo / "models")
    assert cli(repo, "check", "--pinned-only", "--write", "--model-dir", models) == 0
    out = capsys.readouterr().out
    assert "  1 pytest" in out and "pinned: reproduces on" in out
    rows = parse_rows((repo / "findings.md").read_text())
    assert rows[1].pinned.startswith("reproduces on ") and rows[2].pinned.startswith("fixed in")
    assert rows[3].script is None
    # Unchanged results pass the gate; a report that newly reads otherwise fails it.
    assert cli(repo, "check", "--pinned-only", "--gate", "--model-dir", models) == 0
    fake(repo / "scripts", 1, "fixed", 0)
    capsys.readouterr()
    assert cli(repo, "check", "--pinned-only", "--gate", "--report", "1",
               "--model-dir", models) == 1
    assert "GATE: report 1: fixed at the pin, where docs/findings.md's table says " \
           "'reproduces on" in capsys.readouterr().out
    # A report asked for by number that has no script fails the gate too.
    assert cli(repo, "check", "--pinned-only", "--gate", "--report", "2", "--report", "3",
               "--model-dir", models) == 1


def test_the_gate() -> None:
    entry = Entry(Path("r05_x.py"), 5, "lib", "main", (), None)
    table = {5: Row(5, "lib", "r05_x.py", pinned="reproduces on 1.0")}
    same = Checked(entry, Result(Outcome.REPRODUCES, version="1.0"), None)
    assert gate([same], table) == []
    assert gate([same], {}) == []  # nothing recorded yet: any verdict is news, not a fault
    broken = Checked(entry, Result(Outcome.CANNOT_RUN, "script crashed: boom"), None)
    assert gate([broken], table) == ["report 5: cannot run at the pin: script crashed: boom"]
    # A report the table records as not runnable may start to run.
    assert gate([same], {5: Row(5, "lib", None, pinned="cannot run: no venv")}) == []


def test_a_fixed_newest_release_flags_the_workaround() -> None:
    entry = Entry(Path("r05_x.py"), 5, "lib", "main", (), "adapter.py: the workaround")
    done = Checked(entry, Result(Outcome.REPRODUCES, version="1.0"),
                   Result(Outcome.FIXED, version="1.1"))
    assert done.newest_cell() == "fixed in 1.1; our workaround can go"
    assert done.line().endswith("workaround can go: adapter.py: the workaround")
    same = Checked(entry, Result(Outcome.REPRODUCES, version="1.0"),
                   Result(Outcome.REPRODUCES, version="1.0"), newest_is_pin=True)
    assert same.newest_cell() == "reproduces on 1.0 (the pin is the newest)"
    assert "workaround" not in same.line()


def test_a_llama_server_script_without_args_cannot_run(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Said before any build: the binary is not needed to know the script cannot be run.
    (repo / "scripts" / "r03_llamacpp_fake.py").write_text(
        'LEDGER = {"report": 3, "library": "llama.cpp", "venv": "llama-server", '
        '"presets": [], "workaround": None}\n')
    assert cli(repo, "check", "llama-server", "--model-dir", str(repo / "models")) == 0
    out = capsys.readouterr().out
    assert "pinned: cannot run: its LEDGER has no \"args\" naming llama-server's files" in out


def test_table_redoes_the_upstream_column_without_running_a_script(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = str(repo / "models")
    assert cli(repo, "check", "--pinned-only", "--write", "--model-dir", models) == 0
    findings = repo / "findings.md"
    before = parse_rows(findings.read_text())
    assert before[1].upstream == "not filed" and before[3].upstream == "not recorded"
    assert cli(repo, "table", "--check") == 0
    # The report is filed upstream, and the script would now crash: `table` runs nothing.
    (repo / "scripts" / "r01_pytest_fake.py").write_text(
        'LEDGER = {"report": 1, "library": "pytest", "venv": "main", "presets": [], '
        '"workaround": None, "upstream": "filed: pytest-dev/pytest#1 (open)"}\n'
        'raise SystemExit("must not run")\n')
    capsys.readouterr()
    assert cli(repo, "table", "--check") == 1
    assert "not up to date" in capsys.readouterr().out
    assert cli(repo, "table") == 0
    after = parse_rows(findings.read_text())
    assert after[1].upstream == "filed: pytest-dev/pytest#1 (open)"
    assert {n: replace(row, upstream="") for n, row in after.items() if n != 1} == \
        {n: replace(row, upstream="") for n, row in before.items() if n != 1}
    assert (after[1].pinned, after[1].checked) == (before[1].pinned, before[1].checked)
    # Idempotent, and the gate reads the rewritten table as before.
    text = findings.read_text()
    assert cli(repo, "table") == 0 and findings.read_text() == text
    assert cli(repo, "table", "--check") == 0
    fake(repo / "scripts", 1, "reproduces", 1, upstream="filed: pytest-dev/pytest#1 (open)")
    assert cli(repo, "check", "--pinned-only", "--gate", "--model-dir", models) == 0
    assert findings.read_text() == text
