"""Which Hypothesis profile the conformance suite runs under, each way in, for one install:
`python ci/profiles_table.py --python PY --install NAME [--no-check]`.

Every run starts from a fresh neutral directory (no ini file, no conftest.py but the user's
own) with the toy engine, runs the suite's `liveness` check on it, and reads the profile and
examples a check from the header, and the workloads the check ran from the summary (its seed
workloads plus the profile's max_examples). It prints one markdown row per run and, unless
--no-check, exits 1 when a run did not get the profile the rule in engines.testing.profiles
gives it. CI, HYPOTHESIS_PROFILE and PYTEST_ADDOPTS are cleared except where a row sets them;
PYTHONPATH is kept (it is how a worktree stands in for the editable install).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = "liveness"
OVERRIDE = ("import pytest\nfrom toy import ToyEngine\n\n\n@pytest.fixture\n"
            "def engine_factory():\n    return ToyEngine\n")
SEEDS = ("from engines.testing.context import build_context\n"
         "from engines.testing.search import drawing_of\n"
         "from engines.testing.seed_workloads import seed_workloads\n"
         "from toy import ToyEngine\n"
         "ctx = build_context(ToyEngine)\n"
         f"print(len(seed_workloads(drawing_of(ctx, {CHECK!r}), alone=ctx.oracle.tokens)))\n")
WHERE = ("import engines, importlib.metadata as m\n"
         "eps = [ep.value for d in m.distributions() for ep in d.entry_points\n"
         "       if ep.group == 'pytest11' and ep.name == 'batching_engines']\n"
         "print(engines.__file__, eps)\n")


@dataclass(frozen=True)
class Row:
    way: str  # --engine, ini key, fixture override
    env: dict[str, str]
    args: tuple[str, ...]
    expected: str  # the profile the rule gives
    examples: int  # its max_examples


ROWS = [
    Row("--engine", {}, (), "batching-dev", 4),
    Row("ini key", {}, (), "batching-dev", 4),
    Row("fixture override", {}, (), "batching-dev", 4),
    Row("--engine", {}, ("--hypothesis-profile=batching-ci",), "batching-ci", 40),
    Row("fixture override", {"HYPOTHESIS_PROFILE": "batching-ci"}, (), "batching-ci", 40),
    Row("ini key", {"CI": "true"}, (), "batching-ci", 40),
]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS")}
    return {**env, **extra}


def _neutral(way: str, toy: str) -> Path:
    where = Path(tempfile.mkdtemp(prefix="profiles-neutral-"))
    (where / "toy.py").write_text(toy)
    if way == "ini key":
        (where / "pytest.ini").write_text("[pytest]\nengine = toy:ToyEngine\n")
    if way == "fixture override":
        (where / "conftest.py").write_text(OVERRIDE)
        (where / "test_mine.py").write_text(
            "from engines.testing.conformance import *  # noqa: F403\n")
    return where


def run(python: str, row: Row, toy: str) -> tuple[str, str, str, str]:
    """(profile, examples a check, workloads, error) as observed."""
    cwd = _neutral(row.way, toy)
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-k", CHECK, *row.args]
    if row.way != "fixture override":
        cmd += ["--pyargs", "engines.testing.conformance"]
    if row.way == "--engine":
        cmd += ["--engine", "toy:ToyEngine"]
    out = subprocess.run(cmd, cwd=cwd, env=_env(row.env), capture_output=True, text=True)
    text = out.stdout + out.stderr
    profile = re.search(r"batching-engines: engine .*hypothesis profile '([^']+)'", text)
    examples = re.search(r"hypothesis profile '[^']+' .*?: (\d+) examples a check", text)
    workloads = re.search(r"check\(s\) passed over (\d+) workloads", text)
    error = "" if out.returncode == 0 else f"exit {out.returncode}: {text[-2000:]}"
    return (profile[1] if profile else "?", examples[1] if examples else "?",
            workloads[1] if workloads else "?", error)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--install", required=True, help="the install's name in the table")
    parser.add_argument("--no-check", action="store_true", help="print the table only")
    parser.add_argument("--header", action="store_true", help="print the table's header")
    args = parser.parse_args(argv)
    toy = (ROOT / "examples" / "toy_engine.py").read_text()
    probe = _neutral("--engine", toy)
    print(f"# {args.install}: " + subprocess.run(
        [args.python, "-c", WHERE], cwd=probe, env=_env({}), capture_output=True, text=True,
        check=True).stdout.strip(), file=sys.stderr)
    seeds = int(subprocess.run([args.python, "-c", SEEDS], cwd=probe, env=_env({}),
                               capture_output=True, text=True, check=True).stdout)
    if args.header:
        print("| way in | install | asked for | profile in force | examples a check "
              f"| {CHECK} workloads (seeds {seeds} + examples) |")
        print("|---|---|---|---|---|---|")
    failed = []
    for row in ROWS:
        profile, examples, workloads, error = run(args.python, row, toy)
        asked = " ".join([*(f"{k}={v}" for k, v in row.env.items()), *row.args]) or "nothing"
        print(f"| {row.way} | {args.install} | {asked} | {profile} | {examples} "
              f"| {workloads} |", flush=True)
        if (profile, examples, workloads) != (row.expected, str(row.examples),
                                              str(seeds + row.examples)) or error:
            failed.append(f"{row.way} ({asked}): expected {row.expected}, {row.examples} "
                          f"examples, {seeds + row.examples} workloads{error and '; ' + error}")
    if failed and not args.no_check:
        print("\n".join(["profile not as the rule says:", *failed]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
