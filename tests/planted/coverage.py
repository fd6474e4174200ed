"""Which planted bug each check's tests run, for tests/test_layout.py: every planted bug in
tests/planted/ (what names a `caught_by`), and the planted bugs and controls a set of test
files collects, as pytest collects them (their parameters) or imports them by name."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import tests.planted

__all__ = ["collected", "planted_bugs"]

ROOT = Path(__file__).resolve().parents[2]
# Run in a fresh interpreter: the test files' parameters as pytest collects them, each a
# (file, module, name) row for a value defined under tests/planted/ (and a (file, "", "") row
# for each test, so a file skipped whole, an optional library missing, shows as such).
_COLLECT = """
import json, sys
import pytest

class Record:
    def pytest_collection_finish(self, session):
        rows = []
        for item in session.items:
            rows.append([item.path.name, "", ""])
            callspec = getattr(item, "callspec", None)
            for value in (callspec.params.values() if callspec else ()):
                module = getattr(value, "__module__", None) or ""
                if module.startswith("tests.planted.") and hasattr(value, "__name__"):
                    rows.append([item.path.name, module, value.__name__])
        with open(sys.argv[1], "w") as out:
            json.dump(rows, out)

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[2:]],
                     plugins=[Record()]))
"""


def planted_bugs() -> tuple[dict[str, str], list[str]]:
    """({"module:name": caught_by} for every planted bug defined in a module of tests/planted/,
    [the modules that could not be imported here, an optional library missing])."""
    bugs: dict[str, str] = {}
    missing: list[str] = []
    for info in pkgutil.iter_modules(tests.planted.__path__):
        name = f"tests.planted.{info.name}"
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name)
            continue
        for attr, value in vars(module).items():
            caught_by = getattr(value, "caught_by", None)
            if isinstance(caught_by, str) and getattr(value, "__module__", None) == name:
                bugs[f"{name}:{getattr(value, '__name__', attr)}"] = caught_by
    return bugs, missing


def _imported(path: Path) -> set[str]:
    """"module:name" for every name the file imports from tests/planted/."""
    return {f"{node.module}:{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "tests.planted.") for alias in node.names}


def collected(paths: list[Path]) -> tuple[dict[str, set[str]], set[str]]:
    """({file name: the "module:name"s of tests/planted/ its tests take as a parameter or it
    imports by name}, the names of the files pytest collected tests from), for the test files
    under `paths`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        done = subprocess.run([sys.executable, "-c", _COLLECT, str(out), *map(str, paths)],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        rows = json.loads(out.read_text())
    found: dict[str, set[str]] = defaultdict(set)
    for file, module, name in rows:
        if module:
            found[file].add(f"{module}:{name}")
    tested = {file for file, _, _ in rows}
    for path in paths:
        for file in (path.glob("test_*.py") if path.is_dir() else [path]):
            found[file.name] |= _imported(file)
    return found, tested
