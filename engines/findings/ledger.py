"""The LEDGER header of each standalone repro script, read without importing the script.

The scripts import the library under report at their top, which this project's venv may not
have (or has at another version), so the header is parsed from the source with `ast` and
`ast.literal_eval`: a literal dict, as docs/findings/README.md requires.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from engines.findings.arguments import DEFAULT_ARGS, unknown_placeholders

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "docs" / "findings"
FINDINGS = REPO / "docs" / "findings.md"

# rNN_<library>_<slug>.py: the number is the report's, so a script can be found by number and
# a LEDGER naming another report is caught.
SCRIPT_NAME = re.compile(r"^r(\d+)_[a-z0-9]+(?:_[a-z0-9]+)*\.py$")

# The keys every LEDGER has, and the optional ones with their defaults' meaning:
#   needs:   further requirements (pip specifiers) a release venv gets beside the library
#            and numpy, e.g. ["transformers"] for a script whose converter needs it; the
#            pinned venvs (ci/<venv>-env.sh) have them already.
#   version: the release the report was written against where it is not the one the venv
#            pins (transformers 5.16.0 in this project's venv of 5.25.0): the ledger then
#            builds a venv of that release as it does the newest.
#   args:    the script's arguments, with placeholders (engines.findings.arguments); default
#            ["--model-dir", "{model_dir}"].
#   upstream: where the report stands on the library's tracker, as its text in
#            docs/findings.md says ("not filed", "filed: <owner>/<repo>#N (open)",
#            "duplicate of <owner>/<repo>#N", "fixed upstream in V", ...): the status table's
#            "upstream" column. Optional for the parser; tests/findings requires it of every
#            script in docs/findings/.
REQUIRED = ("report", "library", "venv", "presets", "workaround")
OPTIONAL = ("needs", "version", "args", "upstream")

# The venv names that are not ci/<venv>-env.sh's: "main" is this project's .venv (ci/setup.sh),
# for the reports on transformers, which that venv pins.
MAIN_VENV = "main"


class LedgerError(ValueError):
    """A script's LEDGER is missing or malformed; the message names the script and the fault."""


@dataclass(frozen=True)
class Entry:
    """One script's LEDGER, checked."""

    script: Path
    report: int
    library: str          # the PyPI distribution under report
    venv: str             # ci/<venv>-env.sh builds the pinned environment ("main": .venv)
    presets: tuple[str, ...]
    workaround: str | None
    needs: tuple[str, ...] = ()
    version: str | None = None
    args: tuple[str, ...] = DEFAULT_ARGS
    upstream: str | None = None   # the tracker status (the table's "upstream" column)

    def matches(self, names: list[str]) -> bool:
        """Whether a command line's LIBRARY names select this script: the distribution's name
        or the venv's (`openvino-genai` or `openvino`), case-insensitive; none selects all."""
        wanted = {name.lower() for name in names}
        return not wanted or bool({self.library.lower(), self.venv.lower()} & wanted)


def _ledger_node(tree: ast.Module) -> ast.expr | None:
    """The value assigned to LEDGER at the module's top level (the first such assignment)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "LEDGER" for t in node.targets):
            return node.value
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "LEDGER" and node.value is not None):
            return node.value
    return None


def _strings(value: object, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise LedgerError(f"{where}: LEDGER[{key!r}] must be a list of non-empty strings, "
                          f"not {value!r}")
    return tuple(value)


def parse_ledger(source: str, script: Path) -> Entry:
    """The Entry of a script's source text; LedgerError says what is wrong with it."""
    where = script.name
    try:
        tree = ast.parse(source, filename=str(script))
    except SyntaxError as error:
        raise LedgerError(f"{where}: not valid Python ({error.msg}, line {error.lineno})") \
            from error
    node = _ledger_node(tree)
    if node is None:
        raise LedgerError(f"{where}: no top-level LEDGER = {{...}} assignment")
    try:
        raw = ast.literal_eval(node)
    except ValueError as error:
        # A name or a call in the dict: the ledger would have to import the script to read it.
        raise LedgerError(f"{where}: LEDGER is not a literal ({error})") from error
    if not isinstance(raw, dict):
        raise LedgerError(f"{where}: LEDGER is a {type(raw).__name__}, not a dict")
    missing = [key for key in REQUIRED if key not in raw]
    unknown = sorted(str(key) for key in raw if key not in REQUIRED + OPTIONAL)
    if missing or unknown:
        # An unknown key is most often a misspelt optional one, which would silently be unread.
        raise LedgerError(f"{where}: LEDGER lacks {missing} / has unknown keys {unknown}")
    report, library, venv = raw["report"], raw["library"], raw["venv"]
    if not isinstance(report, int) or isinstance(report, bool) or report < 1:
        raise LedgerError(f"{where}: LEDGER['report'] must be a positive int, not {report!r}")
    for key, value in (("library", library), ("venv", venv)):
        if not isinstance(value, str) or not value.strip():
            raise LedgerError(f"{where}: LEDGER[{key!r}] must be a non-empty string")
    workaround = raw["workaround"]
    if workaround is not None and (not isinstance(workaround, str) or not workaround.strip()):
        raise LedgerError(f"{where}: LEDGER['workaround'] must be None or a non-empty string")
    version = raw.get("version")
    if version is not None and (not isinstance(version, str) or not version.strip()):
        raise LedgerError(f"{where}: LEDGER['version'] must be a version string")
    upstream = raw.get("upstream")
    if "upstream" in raw and (not isinstance(upstream, str) or not upstream.strip()
                              or "\n" in upstream):
        # One line: it is a cell of the status table.
        raise LedgerError(f"{where}: LEDGER['upstream'] must be a non-empty one-line string, "
                          f"not {upstream!r}")
    args = _strings(raw.get("args", list(DEFAULT_ARGS)), "args", where)
    if unknown_placeholders(args):
        raise LedgerError(f"{where}: LEDGER['args'] has unknown placeholders "
                          f"{unknown_placeholders(args)}")
    return Entry(script=script, report=report, library=library, venv=venv,
                 presets=_strings(raw["presets"], "presets", where), workaround=workaround,
                 needs=_strings(raw.get("needs", []), "needs", where), version=version,
                 args=args, upstream=upstream.strip() if isinstance(upstream, str) else None)


def read_entry(script: Path) -> Entry:
    """A script file's Entry, its name checked against its LEDGER's report number."""
    entry = parse_ledger(script.read_text(encoding="utf-8"), script)
    match = SCRIPT_NAME.match(script.name)
    if match is None:
        raise LedgerError(f"{script.name}: not named rNN_<library>_<slug>.py")
    if int(match.group(1)) != entry.report:
        raise LedgerError(f"{script.name}: named for report {int(match.group(1))} but its "
                          f"LEDGER says report {entry.report}")
    return entry


def _number(path: Path) -> int:
    match = re.match(r"^r(\d+)_", path.name)
    return int(match.group(1)) if match else -1


def script_paths(folder: Path = SCRIPTS) -> list[Path]:
    """The repro scripts in `folder` (files named r<digits>_*.py), in report order."""
    return sorted((p for p in folder.glob("r*_*.py") if _number(p) >= 0),
                  key=lambda p: (_number(p), p.name))


def entries(folder: Path = SCRIPTS) -> tuple[list[Entry], list[LedgerError]]:
    """Every script's Entry, and the errors of those whose LEDGER cannot be read (reported,
    not raised, so that one broken header does not hide the other scripts' results)."""
    good: list[Entry] = []
    bad: list[LedgerError] = []
    for path in script_paths(folder):
        try:
            good.append(read_entry(path))
        except LedgerError as error:
            bad.append(error)
    return good, bad
