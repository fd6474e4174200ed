"""Run one repro script in a given python and read its verdict.

The verdict is the script's last `RESULT:` line and its exit status, which must agree
(docs/findings/README.md): 1 and `RESULT: reproduces`, 0 and `RESULT: fixed`, 2 and
`RESULT: cannot-run <why>`. Anything else (no RESULT line, a traceback, a status the contract
has not got, a RESULT the status contradicts) is the script itself failing, reported as
"cannot run (script crashed: <its last output line>)", never as a verdict on the library.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT = 600.0  # seconds; the slowest scripts convert a model first


class Outcome(str, enum.Enum):
    REPRODUCES = "reproduces"
    FIXED = "fixed"
    CANNOT_RUN = "cannot run"


EXIT_STATUS = {Outcome.FIXED: 0, Outcome.REPRODUCES: 1, Outcome.CANNOT_RUN: 2}
RESULT_WORD = {"reproduces": Outcome.REPRODUCES, "fixed": Outcome.FIXED,
               "cannot-run": Outcome.CANNOT_RUN}


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    why: str = ""                # for CANNOT_RUN: the reason, one line
    version: str | None = None   # the library's version it ran at, where known

    def describe(self) -> str:
        """'reproduces on 0.32.0', 'fixed in 0.33.0', 'cannot run on 0.32.0: why'."""
        at = "" if self.version is None else \
            f" {'in' if self.outcome is Outcome.FIXED else 'on'} {self.version}"
        tail = f": {self.why}" if self.outcome is Outcome.CANNOT_RUN and self.why else ""
        return f"{self.outcome.value}{at}{tail}"


def last_line(text: str) -> str:
    """The last non-blank line of a program's output, stripped ('' if none)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def crashed(stdout: str, stderr: str, detail: str = "") -> Result:
    # stderr's last line is a traceback's exception where there is one; else stdout's.
    line = last_line(stderr) or last_line(stdout) or "no output"
    return Result(Outcome.CANNOT_RUN, f"script crashed{detail}: {line}")


def parse_result(stdout: str, stderr: str, returncode: int) -> Result:
    """The verdict of a finished script from its output and exit status."""
    verdict: tuple[Outcome, str] | None = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("RESULT:"):
            word, _, why = line.removeprefix("RESULT:").strip().partition(" ")
            outcome = RESULT_WORD.get(word)
            # The last RESULT line counts: a script may print its verdict only at the end.
            verdict = None if outcome is None else (outcome, why.strip())
    if verdict is None:
        return crashed(stdout, stderr, f" (exit status {returncode}, no RESULT line)")
    outcome, why = verdict
    if EXIT_STATUS[outcome] != returncode:
        return crashed(stdout, stderr, f" (RESULT: {outcome.value} but exit status "
                                       f"{returncode})")
    if outcome is Outcome.CANNOT_RUN:
        return Result(outcome, why or "the script gave no reason")
    return Result(outcome)


def run_script(python: str | Path, script: Path, args: Sequence[str] = (), *,
               timeout: float = DEFAULT_TIMEOUT, env: dict[str, str] | None = None) -> Result:
    """Run `python script args...` and return its verdict (CANNOT_RUN past `timeout`).

    It runs in an empty temporary folder with PYTHONPATH unset, so that a script which
    imports this project (or a file beside it) by accident fails here as it would for the
    library's maintainer, instead of finding it through the working directory."""
    environ = dict(os.environ if env is None else env)
    environ.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="findings-run-") as cwd:
        try:
            # A session of its own, so that a timeout ends what the script started too (a
            # server, a converter's workers), not only the script.
            proc = subprocess.Popen([str(python), str(script.resolve()), *args], cwd=cwd,
                                    env=environ, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as error:  # the python itself is missing or not executable
            return Result(Outcome.CANNOT_RUN, f"could not start {python}: {error}")
        with proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return Result(Outcome.CANNOT_RUN, f"timed out after {timeout:g} s")
    return parse_result(stdout, stderr, proc.returncode)
