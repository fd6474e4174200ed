"""The interpreters the repro scripts run in: the library's pinned venv (CI's own), and a venv
of one release (the newest on the package index, or the one a LEDGER names) built on demand
in a cache outside the repository.

A pinned venv is whatever `bash ci/<venv>-env.sh` prints on its last stdout line: the same
venv CI builds and tests the adapter in, so that the ledger's "pinned" is CI's. Where that
script cannot build it, it prints a SKIP reason and no python, which becomes the reason the
script cannot run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from engines.findings.ledger import MAIN_VENV, REPO, Entry

# The venvs whose env script prints a tool, not a python: their scripts run in this project's
# python, and their LEDGER's `args` pass the tool ({server}) and the files made for it.
TOOL_VENVS = ("llama-server",)
# The package on the index each tool is built from (ci/llama-server-env.sh builds llama.cpp
# from the sdist of llama-cpp-python, whose vendored source is its release).
TOOL_SOURCES = {"llama-server": "llama-cpp-python"}
BUILT = ".findings-built"       # written last into a release venv: a venv without it is unfinished
ENV_TIMEOUT = 3600.0            # a first build of vLLM's venv downloads ~3.5 GB
PIP_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Interpreter:
    """Where a script runs: `python`, the `tool` of a tool venv (llama-server's binary), and
    the library's version there; or, with python None, `why` it cannot run."""

    python: Path | None
    version: str | None = None
    why: str = ""
    tool: Path | None = None


def cache_dir() -> Path:
    """Where release venvs are kept: outside the repository (they are GBs, and a checkout's
    `git clean` should not cost their rebuild), beside the project's other caches."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "batching-engines" / "findings-venvs"


def main_python() -> Path:
    """This project's .venv python (ci/setup.sh), else the one running the ledger."""
    candidate = REPO / ".venv" / "bin" / "python"
    return candidate if candidate.exists() else Path(sys.executable)


def library_version(python: Path, library: str) -> str | None:
    """The installed version of distribution `library` in `python`'s environment."""
    code = "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))"
    try:
        done = subprocess.run([str(python), "-c", code, library], capture_output=True,
                              text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def pinned(entry: Entry) -> Interpreter:
    """The interpreter of `entry`'s pinned version: the venv of its LEDGER's `version` where
    it names one, else this project's .venv ("main") or ci/<venv>-env.sh's."""
    if entry.version is not None:
        return release(entry, entry.version)
    if entry.venv == MAIN_VENV:
        python = main_python()
        return Interpreter(python, library_version(python, entry.library))
    env_script = REPO / "ci" / f"{entry.venv}-env.sh"
    if not env_script.is_file():
        return Interpreter(None, why=f"no ci/{entry.venv}-env.sh for LEDGER venv "
                                     f"{entry.venv!r}")
    try:
        done = subprocess.run(["bash", str(env_script)], cwd=REPO, capture_output=True,
                              text=True, timeout=ENV_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Interpreter(None, why=f"ci/{entry.venv}-env.sh ran past {ENV_TIMEOUT:g} s")
    if done.returncode != 0:
        return Interpreter(None, why=f"ci/{entry.venv}-env.sh failed: {_tail(done.stderr)}")
    printed = done.stdout.strip().splitlines()
    path = Path(printed[-1].strip()) if printed else None
    if path is None or not path.exists():
        # The env script's documented way of saying "cannot be built here": a SKIP line on
        # stderr and no path on stdout.
        skips = [line for line in done.stderr.splitlines() if line.startswith("SKIP")]
        return Interpreter(None, why=skips[-1] if skips else
                           f"ci/{entry.venv}-env.sh printed no path")
    path = path if path.is_absolute() else REPO / path
    if entry.venv in TOOL_VENVS:
        found = next(filter(None, (re.search(r"-(\d[\w.]*)$", part)
                                   for part in reversed(path.parts[:-1]))), None)
        # Its folder is named for the llama-cpp-python sdist whose vendored llama.cpp it is.
        version = f"llama-cpp-python {found.group(1)}" if found else None
        return Interpreter(main_python(), version, tool=path)
    return Interpreter(path, library_version(path, entry.library))


def newest_version(library: str, python: Path | None = None) -> str:
    """The newest release of `library` on the package index pip is configured with (`pip
    index versions`, which skips pre-releases); RuntimeError when pip cannot say."""
    command = [str(python or sys.executable), "-m", "pip", "index", "versions", library]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                              check=False)
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"pip index versions {library} ran past 300 s") from error
    newest = parse_newest(done.stdout) if done.returncode == 0 else None
    if newest is None:
        raise RuntimeError(f"pip index versions {library}: {_tail(done.stderr)}")
    return newest


def parse_newest(output: str) -> str | None:
    """The newest version in `pip index versions` output, whose first line (after any
    warnings) is "<name> (<newest>)"."""
    found = re.search(r"^\S+ \(([^)\s]+)\)$", output, re.MULTILINE)
    return found.group(1) if found else None


def torch_pin() -> str:
    """The torch this project's venv runs (its CPU build): a release venv whose script needs
    torch gets the same, never the multi-GB CUDA build a bare `torch` resolves to."""
    try:
        return f"torch=={metadata.version('torch').split('+')[0]}"
    except metadata.PackageNotFoundError:
        return "torch"


def requirements(entry: Entry, version: str) -> tuple[list[str], list[str]]:
    """What a release venv installs: torch first where the LEDGER needs it (alone, so that
    nothing later pulls another build), then the library at `version`, numpy and the rest of
    its needs."""
    torch = [torch_pin()] if any(re.split(r"[<>=!~\[; ]", need)[0] == "torch"
                                 for need in entry.needs) else []
    rest = [need for need in entry.needs if re.split(r"[<>=!~\[; ]", need)[0] != "torch"]
    return torch, [f"{entry.library}=={version}", "numpy", *torch, *rest]


def release_dir(entry: Entry, version: str) -> Path:
    """<cache>/<library>-<version>, plus a digest of the needs where there are any, so that
    two scripts of a library with other needs never share (and break) one venv."""
    name = f"{entry.library}-{version}"
    if entry.needs:
        name += "-" + hashlib.sha256(" ".join(sorted(entry.needs)).encode()).hexdigest()[:8]
    return cache_dir() / name


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (two ledgers building one venv wait for each other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip(python: Path, args: Sequence[str], log: Path) -> bool:
    with log.open("a") as out:
        out.write(f"$ pip {' '.join(args)}\n")
        out.flush()
        try:
            done = subprocess.run([str(python), "-m", "pip", *args], stdout=out,
                                  stderr=subprocess.STDOUT, timeout=PIP_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0


def base_python() -> str:
    """The interpreter release venvs are made with: python3.11 as CI's venvs are, where
    there is one, else the ledger's own."""
    return shutil.which("python3.11") or sys.executable


def release(entry: Entry, version: str) -> Interpreter:
    """A venv of `entry.library` at `version` (built once, reused after), for `entry`'s script.

    Built in place under a lock and marked finished last, not built elsewhere and renamed:
    a venv's console scripts carry its path in their first line, and a converter a script
    runs may be one of them."""
    venv = release_dir(entry, version)
    python = venv / "bin" / "python"
    log = venv.with_name(venv.name + ".log")
    with _locked(venv.with_name(venv.name + ".lock")):
        if not (venv / BUILT).is_file():
            shutil.rmtree(venv, ignore_errors=True)  # a leftover without its marker
            log.write_text("")
            made = subprocess.run([base_python(), "-m", "venv", str(venv)],
                                  capture_output=True, text=True, check=False)
            if made.returncode != 0:
                return Interpreter(None, version,
                                   why=f"could not make a venv: {_tail(made.stderr)}")
            torch, packages = requirements(entry, version)
            for args in ([["install", *torch]] if torch else []) + [["install", *packages]]:
                if not _pip(python, args, log):
                    shutil.rmtree(venv, ignore_errors=True)
                    return Interpreter(None, version, why=(
                        f"pip could not install {' '.join(args[1:])} "
                        f"({_tail(log.read_text(errors='replace'))}; log: {log})"))
            (venv / BUILT).write_text(" ".join(packages) + "\n")
    return Interpreter(python, library_version(python, entry.library) or version)
