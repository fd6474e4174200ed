"""The package's shape: no import cycle anywhere in engines/ (imports inside functions count),
and data flowing one way: protocol <- engines <- testing / bench, which never import each
other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "engines"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str) -> set[str]:
    """Every engines.* module `name` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {m for m in found if m in MODULES and m != name and m != "engines"}


GRAPH = {name: _imports(name) for name in MODULES}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(GRAPH):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_is_read() -> None:
    assert "engines.protocol" in GRAPH["engines.testing.recorder"]
    assert "engines.testing.search" in GRAPH["engines.testing.conformance"]  # in a function


def test_no_import_cycle_in_engines() -> None:
    assert _cycle() is None, " -> ".join(_cycle() or [])


def test_testing_and_bench_never_import_each_other() -> None:
    for name, deps in GRAPH.items():
        for other, mine in (("engines.bench", "engines.testing"),
                            ("engines.testing", "engines.bench")):
            if name.startswith(mine):
                assert not [d for d in deps if d.startswith(other)], (name, deps)


def test_the_protocol_imports_nothing_of_ours() -> None:
    assert GRAPH["engines.protocol"] == set()


def _names(package: str) -> tuple[set[str], set[str]]:
    """(module names, class names) defined in one subpackage of engines."""
    modules, classes = set(), set()
    for name, path in MODULES.items():
        if name.startswith(f"engines.{package}."):
            modules.add(name.rsplit(".", 1)[1])
            tree = ast.parse(path.read_text())
            classes |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return modules, classes


def test_one_name_one_thing_across_testing_and_bench() -> None:
    (tm, tc), (bm, bc) = _names("testing"), _names("bench")
    assert tm and bm and tc and bc
    assert not (tm & bm) - {"__init__"}, tm & bm
    assert not tc & bc, tc & bc
