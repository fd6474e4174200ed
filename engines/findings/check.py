"""Run the selected scripts at the pinned version and at the newest release, and say per
report what each shows; compare against docs/findings.md's table for CI's gate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from engines.findings import venvs
from engines.findings.arguments import ArgumentError, fill, needs_tool
from engines.findings.ledger import Entry
from engines.findings.run import DEFAULT_TIMEOUT, Outcome, Result, run_script
from engines.findings.table import Row, outcome_of


@dataclass(frozen=True)
class Checked:
    entry: Entry
    pinned: Result
    newest: Result | None       # None: not run (--pinned-only)
    newest_is_pin: bool = False  # the newest release is the pinned one: run once, shown twice

    @property
    def workaround_can_go(self) -> bool:
        """Fixed in the newest release while the LEDGER names a workaround of ours for it."""
        return (self.newest is not None and self.newest.outcome is Outcome.FIXED
                and self.entry.workaround is not None)

    def newest_cell(self) -> str | None:
        if self.newest is None:
            return None
        text = self.newest.describe()
        if self.newest_is_pin:
            text += " (the pin is the newest)"
        if self.workaround_can_go:
            text += "; our workaround can go"
        return text

    def line(self) -> str:
        """The command's line for this report."""
        text = (f"{self.entry.report:>3} {self.entry.library:<18} "
                f"pinned: {self.pinned.describe()}")
        if self.newest is not None:
            text += f" | newest: {self.newest_cell()}"
        if self.workaround_can_go:
            text += f"\n      workaround can go: {self.entry.workaround}"
        return text


def same_release(a: str | None, b: str | None) -> bool:
    """Whether two version strings name one release (2026.4.1 is 2026.4.1.0)."""
    if a is None or b is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


class Checker:
    """Runs scripts, building each interpreter once per run (a library's scripts share the
    pinned venv and the newest-release venv)."""

    def __init__(self, model_dir: Path, *, timeout: float = DEFAULT_TIMEOUT,
                 say: Callable[[str], None] = print) -> None:
        self.model_dir = model_dir
        self.timeout = timeout
        self.say = say  # progress, for runs that take minutes per venv
        self._pinned: dict[tuple[str, str, str | None], venvs.Interpreter] = {}
        self._newest: dict[str, str | RuntimeError] = {}
        self._release: dict[tuple[str, str, tuple[str, ...]], venvs.Interpreter] = {}

    def run(self, entry: Entry, where: venvs.Interpreter) -> Result:
        if where.python is None:
            return Result(Outcome.CANNOT_RUN, where.why, where.version)
        try:
            args = fill(entry.args, model_dir=self.model_dir, tool=where.tool)
        except ArgumentError as error:
            return Result(Outcome.CANNOT_RUN, str(error), where.version)
        result = run_script(where.python, entry.script, args, timeout=self.timeout)
        return Result(result.outcome, result.why, where.version)

    def pinned(self, entry: Entry) -> venvs.Interpreter:
        key = (entry.venv, entry.library, entry.version)
        if key not in self._pinned:
            self.say(f"... the pinned venv for {entry.library} ({entry.venv})")
            self._pinned[key] = venvs.pinned(entry)
        return self._pinned[key]

    def newest_version(self, library: str) -> str | RuntimeError:
        if library not in self._newest:
            try:
                self._newest[library] = venvs.newest_version(library)
            except RuntimeError as error:
                self._newest[library] = error
        return self._newest[library]

    def release(self, entry: Entry, version: str) -> venvs.Interpreter:
        key = (entry.library, version, entry.needs)
        if key not in self._release:
            self.say(f"... a venv of {entry.library} {version} (first time: pip installs it "
                     f"under {venvs.cache_dir()})")
            self._release[key] = venvs.release(entry, version)
        return self._release[key]

    def check(self, entry: Entry, *, pinned_only: bool = False) -> Checked:
        self.say(f"... report {entry.report}: {entry.script.name}")
        if entry.venv in venvs.TOOL_VENVS and not needs_tool(entry.args):
            # Its scripts take the tool and files made for it, never --model-dir alone:
            # without `args` saying which, running one would only fail less clearly.
            why = (f"its LEDGER has no \"args\" naming {entry.venv}'s files (see "
                   f"docs/findings/README.md)")
            return Checked(entry, Result(Outcome.CANNOT_RUN, why),
                           None if pinned_only else Result(Outcome.CANNOT_RUN, why))
        pinned = self.run(entry, self.pinned(entry))
        if pinned_only:
            return Checked(entry, pinned, None)
        if entry.venv in venvs.TOOL_VENVS:
            # Its pinned build is CI's, from llama-cpp-python's vendored source: the newest
            # release is that package's, and only the pinned one is built.
            source = venvs.TOOL_SOURCES[entry.venv]
            newest = self.newest_version(source)
            if not isinstance(newest, RuntimeError) and pinned.version == f"{source} {newest}":
                return Checked(entry, pinned, pinned, newest_is_pin=True)
            out = f"{source} {newest}" if not isinstance(newest, RuntimeError) else str(newest)
            return Checked(entry, pinned, Result(
                Outcome.CANNOT_RUN, f"the ledger builds no newest {entry.venv} (newest: {out})"))
        newest = self.newest_version(entry.library)
        if isinstance(newest, RuntimeError):
            return Checked(entry, pinned, Result(Outcome.CANNOT_RUN, str(newest)))
        if same_release(newest, pinned.version):
            return Checked(entry, pinned, pinned, newest_is_pin=True)
        return Checked(entry, pinned, self.run(entry, self.release(entry, newest)))


def gate(results: list[Checked], table: Mapping[int, Row]) -> list[str]:
    """CI's verdict on a run, as the faults it finds (none: pass). A bug that reproduces is
    the expected state and passes. A fault is a script that cannot run at the pin, or a
    pinned result other than the one the table records: at an unmoved pin the library has
    not changed, so a changed verdict means the script (or the pin) did, and the table must
    be rerun and rewritten (`check --write`) in the same change."""
    faults: list[str] = []
    for done in results:
        number = done.entry.report
        if done.pinned.outcome is Outcome.CANNOT_RUN:
            faults.append(f"report {number}: cannot run at the pin: {done.pinned.why}")
            continue
        row = table.get(number)
        recorded = outcome_of(row.pinned) if row else None
        # Only a recorded verdict binds: "not checked" or "cannot run" in the table may turn
        # into one.
        if recorded in (Outcome.REPRODUCES, Outcome.FIXED) and recorded is not \
                done.pinned.outcome:
            faults.append(f"report {number}: {done.pinned.outcome.value} at the pin, where "
                          f"docs/findings.md's table says {row.pinned if row else ''!r}")
    return faults
