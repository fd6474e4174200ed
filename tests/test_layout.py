"""The package's shape: no import cycle anywhere in engines/ (imports inside functions count);
engines/ laid out by kind, data flowing one way (FLOW below): protocol <- models <- core <-
slot / paged / sequential / adapters, and testing / bench, which never import each other, see
engines through the protocol and factories only; no module is an alias of another (a path
that moved is renamed everywhere), and every spec path and engines/ file the repo names exists."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

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
    assert "engines.core.decoder" in GRAPH["engines.paged.forward"]
    assert "engines.slot.engine" in GRAPH["engines.slot.continuous"]
    assert "engines.adapters.vllm.adapter" in GRAPH["engines.adapters.vllm"]  # a star import


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


# Each part of engines/ and the parts besides itself it may import: the one-way flow.
_ENGINE_BASE = {"engines.core", "engines.protocol", "engines.models", "engines.threads",
                "engines.tokenizer"}
_ADAPTER_BASE = {"engines.adapters.common", "engines.core", "engines.protocol", "engines.models",
                 "engines.threads", "engines.tokenizer"}
FLOW: dict[str, set[str]] = {
    "engines.protocol": set(),  # the contract
    "engines.models": set(),  # presets, shared by engines, bench and the repo's tests
    # The presets' byte-level BPE, trained and cached per vocabulary size.
    "engines.tokenizer": {"engines.models"},
    "engines.factories": {"engines.protocol"},  # MODULE:CALLABLE specs, for testing and bench
    # The thread count the bench's --threads hands to engines built in its process.
    "engines.threads": set(),
    "engines.core": {"engines.protocol", "engines.models", "engines.threads",
                     "engines.tokenizer"},
    "engines.slot": _ENGINE_BASE,
    "engines.paged": _ENGINE_BASE,
    "engines.sequential": _ENGINE_BASE,
    # The independent reference: engines/core only for bad input and LoRA names
    # (test_the_independent_reference_shares_no_processing holds it to that).
    "engines.independent": _ENGINE_BASE,
    # Factories over the zoo presets: the engines and adapters are imported by name, when a
    # factory is called (engines.zoo.ENGINES), so importing it pulls in no library; and our
    # engines built with the zoo's LoRA adapters, imported when those factories are called.
    "engines.zoo": {"engines.models", "engines.protocol", "engines.loras", "engines.paged",
                    "engines.sequential"},
    # Seeded LoRA adapters of the presets, built with PEFT (engines built with them by name).
    "engines.loras": {"engines.models"},
    # engines.models for the presets saved as checkpoints that converting adapters share.
    "engines.adapters.common": {"engines.core", "engines.protocol", "engines.models",
                                "engines.tokenizer"},
    "engines.adapters.hf": _ADAPTER_BASE,
    "engines.adapters.vllm": _ADAPTER_BASE,
    "engines.adapters.openvino": _ADAPTER_BASE,
    "engines.adapters.ortgenai": _ADAPTER_BASE,
    "engines.adapters.http": _ADAPTER_BASE,
    "engines.adapters.ct2": _ADAPTER_BASE,
    "engines.adapters.mistralrs": _ADAPTER_BASE,
    "engines.testing": {"engines.protocol", "engines.factories"},
    # The findings ledger (docs/findings/): it makes the model files a maintainer's repro reads
    # with the same converters the adapters use (checkpoints, llama.cpp's GGUF, the zoo's
    # LoRAs); the repro scripts themselves import none of engines/.
    "engines.findings": {"engines.adapters.common", "engines.adapters.http", "engines.loras",
                         "engines.models"},
    "engines.bench": {"engines.protocol", "engines.factories", "engines.models",
                      "engines.threads", "engines.tokenizer"},
}
# Imports past FLOW, each with the reason it is allowed.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("engines.adapters.http.llama_lora", "engines.loras"):
        "the zoo's PEFT adapters converted to llama-server's GGUF LoRA (zoo data, as presets)",
    ("engines.adapters.vllm.variants", "engines.loras"):
        "vllm_loras serves the zoo's seeded PEFT adapters (their directories, built once)",
    ("engines.adapters.http.variants", "engines.loras"):
        "vllm_server_loras launches vLLM's server with the zoo's PEFT adapters (as vllm_loras)",
    ("engines.adapters.ortgenai.reference", "engines.sequential"):
        "sequential_int4: our reference over onnxruntime-genai's int4 weights, dequantized "
        "(the reference at that variant's precision, issue 50)",
    ("engines.adapters.ortgenai.reference", "engines.independent"):
        "independent_int4: sequential_int4's independent twin over the same weights, imported "
        "when called",
    ("engines.sequential", "engines.independent"):
        "independent_twin (engines.protocol.IndependentTwin) builds the independent reference "
        "over the sequential reference's own model, imported when called; never the reverse",
}
# Packages that import nothing: `import engines.adapters` must not pull in torch or vllm.
BARE = {"engines", "engines.adapters"}


def _part(name: str) -> str | None:
    """The FLOW part a module belongs to: the longest prefix that names one."""
    parts = [p for p in FLOW if name == p or name.startswith(p + ".")]
    return max(parts, key=len) if parts else None


def test_every_module_has_a_place() -> None:
    homeless = [n for n in MODULES if _part(n) is None and n not in BARE]
    assert not homeless, f"add these to FLOW in tests/test_layout.py: {homeless}"


def test_data_flows_one_way() -> None:
    wrong = []
    for name, deps in GRAPH.items():
        part = _part(name)
        if part is None:
            continue
        for dep in deps:
            theirs = _part(dep)
            if theirs != part and theirs not in FLOW[part] and (name, dep) not in EXCEPTIONS:
                wrong.append(f"{name} -> {dep}")
    assert not wrong, wrong


def test_the_flow_is_checked_where_it_matters() -> None:
    # Engines of one kind never reach into another's, and the adapters never into ours.
    assert "engines.paged" not in FLOW["engines.slot"]
    assert "engines.slot" not in FLOW["engines.paged"]
    assert not {"engines.slot", "engines.paged"} & FLOW["engines.adapters.hf"]
    for consumer in ("engines.testing", "engines.bench"):
        assert not {"engines.core", "engines.slot", "engines.paged"} & FLOW[consumer]


# engines/core modules the independent reference may reach: neither turns logits into tokens.
INDEPENDENT_CORE = {"engines.core", "engines.core.validation", "engines.core.lora"}


def _reached(start: str) -> set[str]:
    """Every module of engines/ that `start`'s package reaches, transitively, with the
    packages above each (they run first)."""
    seen: set[str] = set()
    todo = [m for m in MODULES if m == start or m.startswith(start + ".")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(2, len(parts))]
        todo += sorted(GRAPH.get(name, set()) - seen)
    return seen


def test_the_independent_reference_shares_no_processing() -> None:
    """engines.independent judges engines/core's processing (sampling, constraints, beams,
    prompt logprobs, guided decoding, request state, detokenization) only if it runs none of
    it: it reaches no engines/core module but the bad-input checks and LoRA names, and no
    engine or suite of ours."""
    reached = _reached("engines.independent")
    assert "engines.independent.engine" in reached and "engines.core.validation" in reached
    core = sorted(m for m in reached if m.startswith("engines.core") and
                  m not in INDEPENDENT_CORE)
    assert not core, f"engines.independent reaches engines/core's {core}"
    ours = sorted(m for m in reached if _part(m) in {
        "engines.sequential", "engines.slot", "engines.paged", "engines.testing",
        "engines.bench", "engines.zoo"} or m.startswith("engines.adapters"))
    assert not ours, f"engines.independent reaches {ours}"
    # The same walk from the sequential reference finds the shared processing: it has bite.
    assert {"engines.core.sampling", "engines.core.constraints",
            "engines.core.beams"} <= _reached("engines.sequential")


def _body(name: str) -> list[ast.stmt]:
    body = ast.parse(MODULES[name].read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return body


def test_bare_packages_import_nothing() -> None:
    for name in BARE:
        assert not [n for n in _body(name) if isinstance(n, ast.Import | ast.ImportFrom)], name


def _defined(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The names module `name` defines at top level, star re-exports followed."""
    found: set[str] = set()
    for node in ast.parse(MODULES[name].read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if alias.name != "*":
                    found.add(alias.asname or alias.name)
                elif node.module in MODULES and node.module not in seen:
                    found |= _exported(node.module, seen | {name})
    return found


def _exported(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """What `from name import *` binds: its __all__."""
    for node in ast.parse(MODULES[name].read_text()).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value)) & _defined(name, seen)
    raise AssertionError(f"{name} is star-imported but has no __all__")


# Where the repo names spec paths and engines/ files for users and CI (CHANGELOG.md is history).
_NAMED_IN = ["README.md", "pyproject.toml", "docs/*.md", "ci/*", "scripts/*.py",
             "benchmarks/*.py", "examples/*", "tests/**/*.py", "engines/**/*.py"]
_SPEC = re.compile(r"(?<![\w.])(engines(?:\.\w+)+):([A-Za-z_]\w*)")
# Not preceded by a word, a path or a hyphen: "~/.cache/batching-engines/venvs" names no file.
_FILE = re.compile(r"(?<![\w./-])engines/[\w/]*\w(?:\.py|\.cpp)?")
_PLACEHOLDERS = {"FACTORY"}
_LIB = "LIB"  # stands for any adapter folder's name (engines.adapters.LIB:make_engine)


def _named() -> list[tuple[str, str]]:
    """(file, text) of every file where the repo names spec paths."""
    return [(str(p.relative_to(ROOT)), p.read_text()) for pattern in _NAMED_IN
            for p in sorted(ROOT.glob(pattern)) if p.is_file()]


def test_every_spec_path_the_repo_names_resolves() -> None:
    specs = {(m.group(1), m.group(2), where) for where, text in _named()
             for m in _SPEC.finditer(text) if m.group(2) not in _PLACEHOLDERS
             and _LIB not in m.group(1).split(".")}
    assert ("engines.paged", "PagedEngine", "README.md") in specs  # the scan finds them
    broken = [f"{where}: {module}:{attr}" for module, attr, where in sorted(specs)
              if module not in MODULES or attr not in _defined(module) | _zoo(module, attr)]
    assert not broken, broken


def _zoo(module: str, attr: str) -> set[str]:
    """engines.zoo's factories are made by name (its module __getattr__): `attr` if it names
    one, or begins one (a script that builds the rest, as ci/zoo-matrix.sh does)."""
    if module != "engines.zoo":
        return set()
    from engines.models import ZOO
    from engines.zoo import ENGINES

    names = {f"{e}_{p.replace('-', '_')}" for e in ENGINES for p in ZOO}
    return {attr} if any(n.startswith(attr) for n in names) else set()


def test_every_engines_file_the_repo_names_exists() -> None:
    named = {(m.group(0), where) for where, text in _named() for m in _FILE.finditer(text)
             if _LIB not in m.group(0).split("/")}
    assert ("engines/protocol.py", "README.md") in named
    missing = [f"{where}: {path}" for path, where in sorted(named) if not (ROOT / path).exists()]
    assert not missing, missing


# Packages that replaced a flat module, re-exporting the engine the public spec path names.
REEXPORTING_PACKAGES = {"engines.paged": "engines.paged.engine",
                        "engines.adapters.hf": "engines.adapters.hf.adapter",
                        "engines.adapters.vllm": "engines.adapters.vllm.adapter",
                        "engines.adapters.openvino": "engines.adapters.openvino.adapter",
                        "engines.adapters.ortgenai": "engines.adapters.ortgenai.adapter",
                        "engines.adapters.ct2": "engines.adapters.ct2.adapter",
                        "engines.adapters.mistralrs": "engines.adapters.mistralrs.adapter"}
_HAS_VLLM = importlib.util.find_spec("vllm") is not None
_HAS_OPENVINO = importlib.util.find_spec("openvino_genai") is not None
_HAS_ORTGENAI = importlib.util.find_spec("onnxruntime_genai") is not None
_HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
_HAS_MISTRALRS = importlib.util.find_spec("mistralrs") is not None
_HAS_HTTPX = importlib.util.find_spec("httpx") is not None  # the optional extra `http`
_NEEDS = {"http": (_HAS_HTTPX, "httpx not installed"),
          "vllm": (_HAS_VLLM, "vllm not installed"),
          "openvino": (_HAS_OPENVINO, "openvino_genai not installed"),
          "ortgenai": (_HAS_ORTGENAI, "onnxruntime_genai not installed"),
          "ct2": (_HAS_CT2, "ctranslate2 not installed"),
          "mistralrs": (_HAS_MISTRALRS, "mistralrs not installed")}


@pytest.mark.parametrize("old", [
    pytest.param(old, marks=[pytest.mark.skipif(not have, reason=why)
                             for lib, (have, why) in _NEEDS.items() if lib in old])
    for old in sorted(REEXPORTING_PACKAGES)])
def test_an_old_public_path_gives_the_same_objects(old: str) -> None:
    new = REEXPORTING_PACKAGES[old]
    names = {n for n in _defined(old) if not n.startswith("__")}
    assert names, old
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    assert all(getattr(old_module, n) is getattr(new_module, n) for n in names), names


# One shape per adapter folder (docs/architecture.md): what each must have, and the folders
# whose library cannot load a preset's checkpoint directory, which convert it.
ADAPTER_FILES = ("__init__.py", "adapter.py", "variants.py")
CONVERTING = {"ct2", "openvino", "ortgenai", "http", "mistralrs"}


def test_every_adapter_folder_has_one_shape() -> None:
    folders = sorted(p for p in (PACKAGE / "adapters").iterdir()
                     if p.is_dir() and p.name not in ("common", "__pycache__"))
    assert {p.name for p in folders} >= {"hf", "vllm", "openvino", "ortgenai", "ct2", "http"}
    for folder in folders:
        have = {p.name for p in folder.glob("*.py")}
        missing = [f for f in ADAPTER_FILES if f not in have]
        assert not missing, f"{folder.name}: add {missing} (docs/architecture.md)"
        assert ("convert.py" in have) == (folder.name in CONVERTING), folder.name
        # The package names the public specs: make_engine (http: its server factories).
        init = _defined(f"engines.adapters.{folder.name}")
        assert {"make_engine"} <= init or {"from_env", "vllm_server"} <= init, folder.name


def _is_alias(source: str) -> bool:
    """A module kept as an alias of another: its docstring says "Deprecated alias", or it
    imports a `moved` helper (the warning the old aliases gave, all removed)."""
    tree = ast.parse(source)
    moved = any(isinstance(n, ast.ImportFrom) and any(a.name == "moved" for a in n.names)
                for n in ast.walk(tree))
    return moved or "deprecated alias" in (ast.get_docstring(tree) or "").lower()


def test_no_alias_module_is_left() -> None:
    """A module that moves is renamed everywhere at once, with no alias left at the old path
    (CHANGELOG.md says what each removed spec path is now); adapters/ holds only folders."""
    assert _is_alias('"""Deprecated alias of engines.slot.static."""\nfrom x import *\n')
    assert _is_alias("from engines.deprecated import moved\nmoved(__name__, 'x')\n")
    assert not _is_alias('"""The paged engine."""\nfrom engines.paged.engine import *\n')
    aliases = [name for name, path in sorted(MODULES.items()) if _is_alias(path.read_text())]
    assert not aliases, aliases
    flat = {_module(p) for p in (PACKAGE / "adapters").glob("*.py")} - {"engines.adapters"}
    assert not flat, f"one folder per adapter (docs/architecture.md), not a flat module: {flat}"


# Where a check's name may stand as a string: its own file under engines/testing/checks/
# (its CHECK line) and the registry's ORDER, nowhere else (a property is handed its Check and
# raises check.fail(...); a tally is given the name). Elsewhere in the suite a name is read
# from the registry; these strings only look like one.
_NAME_HOME = "engines.testing.checks"
_FEATURE_HOME = "engines.testing.features"
_NOT_A_CHECK = {("engines.testing.options", "parity"): "the --parity option's ini key",
                ("engines.testing.features.top_logprobs", "logprobs"): "the Drawing field it sets"}


def _check_names_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in names]


def test_the_registry_is_the_only_list_of_check_names() -> None:
    from engines.testing.checks import CHECKS

    names = set(CHECKS)
    # The scan sees a special case of the kind the registry replaced.
    assert _check_names_in('if check == "seeds":\n    pass\n', names) == [(1, "seeds")]
    assert _check_names_in('raise fail("parity", "diverged")', names) == [(1, "parity")]
    found = [f"{name}:{line} {value!r}" for name, path in sorted(MODULES.items())
             if name.startswith("engines.testing") and name != _NAME_HOME
             for line, value in _check_names_in(path.read_text(), names)
             if (name, value) not in _NOT_A_CHECK
             and name != f"{_NAME_HOME}.{value}"  # its own CHECK line
             # a feature of the same name: its own FEATURE line, and the features' ORDER
             and name not in (f"{_FEATURE_HOME}.{value}", _FEATURE_HOME)]
    assert not found, ("check names outside their own file under engines/testing/checks/: "
                       "hand the property its Check, or give the Check a field instead: "
                       f"{found}")
    order = _check_names_in(MODULES[_NAME_HOME].read_text(), names)
    assert sorted(value for _, value in order) == sorted(names), order  # once each


def test_one_file_per_check() -> None:
    """Every check is a file of engines/testing/checks/ named after it, binding CHECK, and
    every file there but the shared base and needs is a check: adding a check is one file."""
    from engines.testing.checks import CHECKS, REGISTRY

    home = PACKAGE / "testing" / "checks"
    files = {p.stem for p in home.glob("*.py")} - {"__init__", "base", "needs"}
    assert files == set(CHECKS), sorted(files ^ set(CHECKS))
    for check in REGISTRY:
        assert MODULES[f"{_NAME_HOME}.{check.name}"].read_text().count(
            f'Check("{check.name}"') == 1, check.name


def test_one_file_per_feature() -> None:
    """Every feature is a file of engines/testing/features/ named after it, binding FEATURE,
    and strategies and seed workloads reach features through the registry only (they import
    no feature's module but the two every draw needs), so adding a feature is one file."""
    from engines.testing.features import FEATURES

    home = PACKAGE / "testing" / "features"
    files = {p.stem for p in home.glob("*.py")} - {"__init__", "base"}
    assert files == {f.name for f in FEATURES}, sorted(files ^ {f.name for f in FEATURES})
    for name in ("engines.testing.strategies", "engines.testing.seed_workloads"):
        imported = {node.module for node in ast.walk(ast.parse(MODULES[name].read_text()))
                    if isinstance(node, ast.ImportFrom) and node.module}
        named = {m for m in imported if m.startswith("engines.testing.features.")}
        # The base pieces, and the two a draw needs whatever is drawn (bad requests, which
        # every workload holds, and satisfiable stop ids beside a constraint).
        assert named <= {"engines.testing.features.base",
                         "engines.testing.features.bad_requests",
                         "engines.testing.features.constraints"}, (name, named)


def test_the_docs_list_every_check_and_feature_as_the_registries_do() -> None:
    """docs/usage.md's tables of checks and features are what engines.testing.docs writes
    from the registries (python -m engines.testing.docs --write), and every check's file
    starts its docstring with its name and what it asserts (the table's sentence)."""
    from engines.testing.docs import USAGE, rewrite

    text = USAGE.read_text()
    assert rewrite(text) == text, "run: python -m engines.testing.docs --write"
    # The rewrite has bite: a block out of date is written anew.
    stale = text.replace("| `token_range` |", "| `token_range_old` |")
    assert stale != text and rewrite(stale) == text


def _declaration_reads(source: str, declared: set[str], readers: set[str]
                       ) -> list[tuple[int, str]]:
    """Reads of an engine's declarations around capabilities_of: getattr / hasattr calls whose
    attribute name is a Capabilities field, and the deprecated readers, imported from
    engines.protocol or called on it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in declared):
            found.append((node.lineno, str(node.args[1].value)))
        elif isinstance(node, ast.ImportFrom) and node.module == "engines.protocol":
            found += [(node.lineno, a.name) for a in node.names if a.name in readers]
        elif (isinstance(node, ast.Attribute) and node.attr in readers
              and isinstance(node.value, ast.Name) and node.value.id == "protocol"):
            found.append((node.lineno, node.attr))
    return found


def test_declarations_are_read_through_capabilities_of_only() -> None:
    import engines.protocol as protocol

    declared = {f.name for f in dataclasses.fields(protocol.Capabilities)}
    assert set(protocol.DECLARATIONS) == declared
    # The readers before Capabilities: deprecated wrappers, kept for third parties only.
    readers = {"supported_sampling", "expected_failed_checks", "logprobs_of", "max_concurrency",
               "position_thresholds", "kv_extra_blocks", "load_settle_s", "tokenizer_of",
               "output_fields"}
    assert all(callable(getattr(protocol, r)) for r in readers)
    assert _declaration_reads('getattr(e, "tokenizer", None)', declared, readers) == [
        (1, "tokenizer")]
    assert _declaration_reads("from engines.protocol import logprobs_of\n"
                              "protocol.max_concurrency(e)", declared, readers) == [
        (1, "logprobs_of"), (2, "max_concurrency")]
    # tests/engines/test_declarations.py proves the deprecated path: the one place it may be used.
    allowed = {PACKAGE / "protocol.py", ROOT / "tests" / "engines" / "test_declarations.py"}
    found = [f"{path.relative_to(ROOT)}:{line} {value!r}"
             for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                                 *(ROOT / "examples").rglob("*.py")])
             if path not in allowed
             for line, value in _declaration_reads(path.read_text(), declared, readers)]
    assert not found, ("read an engine's declarations through engines.protocol's "
                       f"capabilities_of(engine).<field>, not getattr nor the old readers: {found}")


def _attribute_declarations(trees: dict[str, ast.Module], names: set[str]) -> list[str]:
    """Where an engine class (one that has add_request, step or capabilities, a subclass of
    one, or a class one inherits from, by name across `trees`) defines a member named in
    `names` (a class attribute, a property, `self.<name> = ...`), and where any code assigns
    `<name>.<attr> = ...` to an object: what capabilities_of would no longer read there."""
    classes: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for where, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append((where, node))

    def bases(node: ast.ClassDef) -> set[str]:
        return {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                if isinstance(b, ast.Name | ast.Attribute)}

    engines = {name for name, found in classes.items() for _, node in found
               if any(isinstance(s, ast.FunctionDef) and s.name in ("add_request", "step",
                                                                    "capabilities")
                      for s in node.body)}
    while True:  # their subclasses, and what they inherit from
        more = {name for name, found in classes.items() for _, node in found
                if bases(node) & engines}
        more |= {b for name in engines for _, node in classes[name] for b in bases(node)
                 if b in classes}
        if more <= engines:
            break
        engines |= more
    found = []
    for name in sorted(engines):
        for where, node in classes[name]:
            for stmt in node.body:
                targets = (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                           if isinstance(stmt, ast.AnnAssign) else [])
                defined = [t.id for t in targets if isinstance(t, ast.Name)]
                if isinstance(stmt, ast.FunctionDef):
                    defined.append(stmt.name)
                found += [f"{where}:{stmt.lineno} {name}.{d}" for d in defined if d in names]
            found += [f"{where}:{sub.lineno} {name}: self.{t.attr} = ..."
                      for sub in ast.walk(node)
                      if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign)
                      for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
                      if isinstance(t, ast.Attribute) and t.attr in names
                      and isinstance(t.value, ast.Name) and t.value.id == "self"]
    for where, tree in trees.items():
        found += [f"{where}:{sub.lineno} {ast.unparse(t)} = ..." for sub in ast.walk(tree)
                  if isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign)
                  for t in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
                  if isinstance(t, ast.Attribute) and t.attr in names
                  and isinstance(t.value, ast.Name) and t.value.id != "self"]
    return sorted(set(found))


def test_no_engine_declares_through_plain_attributes() -> None:
    """Every engine in the repo (ours, the adapters, the zoo's, the planted and toy engines)
    declares through capabilities() only: a plain attribute of a deprecated declaration's name
    is read only where an engine has no capabilities(), and silently ignored where it has."""
    import engines.protocol as protocol

    names = set(protocol._ATTRIBUTE_DECLARATIONS)  # what the deprecated path reads
    assert names and names <= {f.name for f in dataclasses.fields(protocol.Capabilities)}
    toy = ast.parse("class A:\n    def step(self): self.tokenizer = 'd'\n"
                    "class B(A):\n    logprobs_of = 'raw'\n"
                    "class C:\n    @property\n    def kv_extra_blocks(self): return 1\n"
                    "class D(C):\n    def capabilities(self): pass\n"
                    "class E:\n    logprobs_of = 'raw'\n"  # not an engine: a record of its own
                    "e.max_concurrency = 2\n")
    assert _attribute_declarations({"t": toy}, names) == [
        "t:12 e.max_concurrency = ...", "t:2 A: self.tokenizer = ...", "t:4 B.logprobs_of",
        "t:7 C.kv_extra_blocks"]
    allowed = {
        # The deprecated path's own test: a third party's engine written before Capabilities.
        "tests/engines/test_declarations.py",
        # Capabilities itself, and the Protocols beside it.
        "engines/protocol.py",
    }
    trees = {str(path.relative_to(ROOT)): ast.parse(path.read_text())
             for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
                                 *(ROOT / "examples").rglob("*.py")])}
    found = [f for f in _attribute_declarations(
        {k: v for k, v in trees.items() if k not in allowed}, names)
             # engines.zoo declares a preset's thresholds on a third party's engine that has
             # no capabilities() the deprecated way, as that engine declares the rest.
             if not f.startswith("engines/zoo.py:") or "engine.position_thresholds" not in f]
    assert not found, ("declare in capabilities() (a Capabilities, a class's CAPABILITIES "
                       f"widened with dataclasses.replace), not as plain attributes: {found}")


def test_no_test_module_imports_another() -> None:
    """What tests share lives in tests/helpers.py (or a helper package), never in a test
    module: importing one runs its module-level set-up and ties two test files together."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(ROOT)}: {m}" for m in mods
                      if m.rsplit(".", 1)[-1].startswith("test_")]
    assert not found, found


def test_the_readmes_transformers_range_reaches_what_set_up_installs() -> None:
    """README's supported transformers range ends at the release ci/setup.sh installs (the
    newest under pyproject's pin), so the range a user reads is the one CI ran."""
    import transformers

    text = (ROOT / "README.md").read_text()
    found = re.search(r"transformers' continuous batching \((\d+)\.(\d+) to (\d+)\.(\d+)\)", text)
    assert found is not None, "README names transformers CB's supported range"
    installed = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    top = (int(found.group(3)), int(found.group(4)))
    assert top == installed, (f"README says up to {top[0]}.{top[1]}, set-up installs "
                              f"{transformers.__version__}: run the adapter's tests on it, "
                              "then update README, docs/engines.md and pyproject's comment")


def test_the_tests_mirror_the_package() -> None:
    """tests/ is laid out as engines/ is: a folder per part (testing with its checks and
    features, engines' core/slot/paged, each adapter's library, bench, findings), only the
    repo-wide tests at its top, and no file named for a wave of work rather than its subject."""
    tests = ROOT / "tests"
    top = sorted(p.name for p in tests.glob("test_*.py"))
    assert top == ["test_layout.py", "test_zoo.py"], top
    adapters = {p.name for p in (PACKAGE / "adapters").iterdir() if p.is_dir()
                and (p / "__init__.py").is_file()}
    allowed = {"testing", "testing/checks", "testing/features", "engines", "engines/core",
               "engines/slot", "engines/paged", "bench", "findings", "planted", "adapters",
               *(f"adapters/{name}" for name in adapters)}
    folders = {str(p.parent.relative_to(tests)) for p in tests.rglob("test_*.py")} - {"."}
    assert folders <= allowed, sorted(folders - allowed)
    assert not [p for p in tests.rglob("*.py") if "wave" in p.name], "name tests by subject"


def test_every_check_has_its_tests_and_they_run_its_planted_bugs() -> None:
    """Each registered check has tests/testing/checks/test_<check>.py, and its tests run
    exactly the planted bugs whose `caught_by` is that check (those that surface as a crash:
    tests/testing/test_crash_reports.py), and the controls where they apply: a planted bug
    or a check cannot be added and forgotten, nor a bug hunted in two files."""
    from engines.testing.checks import CHECKS
    from tests.planted.catalog import ALL_CONTROLS, controlled_checks
    from tests.planted.coverage import collected, planted_bugs

    home = ROOT / "tests" / "testing" / "checks"
    files = {c: home / f"test_{c}.py" for c in CHECKS}
    files["crash"] = ROOT / "tests" / "testing" / "test_crash_reports.py"
    missing = sorted(c for c, path in files.items() if not path.is_file())
    assert not missing, f"add tests/testing/checks/test_<check>.py for {missing}"
    bugs, unimportable = planted_bugs()
    assert len(bugs) > 50, bugs  # the enumeration has bite
    unknown = {bug: check for bug, check in bugs.items() if check not in files}
    assert not unknown, f"caught_by names no registered check: {unknown}"
    found, tested = collected([home, files["crash"]])
    controls = {f"{c.__module__}:{c.__name__}" for c in ALL_CONTROLS}
    for check, path in sorted(files.items()):
        runs = found[path.name] & bugs.keys()
        want = {bug for bug, by in bugs.items() if by == check}
        assert runs == want, (f"{path.relative_to(ROOT)}: runs {sorted(runs - want)} caught "
                              f"by another check; misses {sorted(want - runs)} "
                              f"(planted modules not importable here: {unimportable})")
    for check in controlled_checks():
        if files[check].name not in tested:  # skipped whole: its optional library is missing
            continue
        lacking = controls - found[files[check].name]
        assert not lacking, f"test_{check}.py: no test that {sorted(lacking)} passes it"
