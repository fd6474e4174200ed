"""`python -m engines.findings list | models DIR | check [LIBRARY ...] | table`: the ledger's
commands (docs/findings/README.md)."""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engines.findings import table
from engines.findings.check import Checked, Checker, gate
from engines.findings.ledger import FINDINGS, SCRIPTS, Entry, entries
from engines.findings.models import default_model_dir, export_all, presets_of
from engines.findings.reports import parse_reports
from engines.findings.run import DEFAULT_TIMEOUT


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m engines.findings",
        description="The ledger of docs/findings.md's standalone repros (docs/findings/).")
    # Where the scripts and the report document are: the repository's, unless a test points
    # elsewhere.
    top.add_argument("--scripts", type=Path, default=SCRIPTS, help=argparse.SUPPRESS)
    top.add_argument("--findings", type=Path, default=FINDINGS, help=argparse.SUPPRESS)
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every report with its script, or none yet")
    models = sub.add_parser("models", help="export the presets the scripts read")
    models.add_argument("dir", type=Path)
    models.add_argument("--preset", action="append", default=[],
                        help="only this preset (repeatable); default: every script's")
    check = sub.add_parser("check", help="run the scripts at the pin and the newest release")
    check.add_argument("libraries", nargs="*", metavar="LIBRARY",
                       help="a LEDGER library or venv name (openvino-genai or openvino); "
                            "default: all")
    check.add_argument("--report", type=int, action="append", default=[],
                       help="only this report (repeatable)")
    check.add_argument("--pinned-only", action="store_true",
                       help="run at the pinned version only")
    check.add_argument("--model-dir", type=Path, default=None,
                       help=f"the model files (exported there first where missing; default "
                            f"{default_model_dir()})")
    check.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                       help="seconds per script run; past it the script cannot run")
    check.add_argument("--write", action="store_true",
                       help="rewrite the status table at the top of docs/findings.md")
    check.add_argument("--gate", action="store_true",
                       help="exit 1 when a script cannot run at the pin or its pinned result "
                            "is not the one docs/findings.md's table records (CI)")
    redo = sub.add_parser(
        "table", help="rewrite docs/findings.md's status table from the results it records "
                      "and the LEDGERs (runs no script)")
    redo.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 where the table is not what it would write")
    return top


def load(scripts: Path) -> list[Entry]:
    good, bad = entries(scripts)
    for error in bad:
        print(f"LEDGER error: {error}", file=sys.stderr)
    return good


def command_list(args: argparse.Namespace) -> int:
    found = entries(args.scripts)
    scripts = {entry.report: entry for entry in found[0]}
    reports = parse_reports(args.findings.read_text(encoding="utf-8"))
    for number in sorted(set(reports) | set(scripts)):
        entry, report = scripts.get(number), reports.get(number)
        title = report.title if report else "(no such report in docs/findings.md)"
        where = f"{entry.script.name} [{entry.venv}]" if entry else "no script yet"
        print(f"{number:>3}  {where:<58} {title}")
    missing = sorted(set(reports) - set(scripts))
    print(f"{len(scripts)} of {len(reports)} reports have a script; none yet: "
          f"{', '.join(map(str, missing)) or '-'}")
    for error in found[1]:
        print(f"LEDGER error: {error}")
    return 1 if found[1] else 0


def command_models(args: argparse.Namespace) -> int:
    presets = args.preset or presets_of(load(args.scripts))
    for path in export_all(presets, args.dir):
        print(path)
    return 0


def select(found: list[Entry], libraries: list[str], reports: list[int]) -> list[Entry]:
    return [entry for entry in found if entry.matches(libraries)
            and (not reports or entry.report in reports)]


def write_table(findings: Path, scripts: Path, results: Sequence[Checked]) -> None:
    # Both read right before writing, not when the run began: reports are edited and scripts
    # added while a run of an hour goes on, and a row is "no script yet" only if none is.
    text = findings.read_text(encoding="utf-8")
    found = entries(scripts)[0]
    updates = {done.entry.report: (done.pinned.describe(), done.newest_cell())
               for done in results}
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    rows = table.merge(parse_reports(text), found, table.parse_rows(text), updates, today)
    findings.write_text(table.replace_block(text, table.render(rows)), encoding="utf-8")


def rendered_table(findings: Path, scripts: Path) -> tuple[str, str]:
    """docs/findings.md's text, and that text with its table redone from the rows it records
    and the LEDGERs as they are now (their "upstream", scripts added or gone), no result
    changed and no date moved."""
    text = findings.read_text(encoding="utf-8")
    rows = table.merge(parse_reports(text), load(scripts), table.parse_rows(text), {}, "")
    return text, table.replace_block(text, table.render(rows))


def command_table(args: argparse.Namespace) -> int:
    text, new = rendered_table(args.findings, args.scripts)
    if args.check:
        if new != text:
            print(f"the status table of {args.findings} is not up to date: run "
                  f"`python -m engines.findings table`")
            return 1
        return 0
    if new != text:
        args.findings.write_text(new, encoding="utf-8")
        print(f"rewrote the status table of {args.findings}", file=sys.stderr)
    return 0


def command_check(args: argparse.Namespace) -> int:
    found = load(args.scripts)
    chosen = select(found, args.libraries, args.report)
    # The table as it stood before this run: the gate compares against it, even where
    # --write is about to rewrite it.
    recorded = table.parse_rows(args.findings.read_text(encoding="utf-8"))
    faults: list[str] = []
    for number in sorted(set(args.report) - {entry.report for entry in chosen}):
        of = " of " + ", ".join(args.libraries) if args.libraries else ""
        faults.append(f"report {number}: no script{of}")
        print(f"{number:>3} no script{of}")
    if not chosen:
        print("no script selected", file=sys.stderr)
        return 2
    model_dir = args.model_dir or default_model_dir()
    presets = presets_of(chosen)
    if presets:
        print(f"... model files {', '.join(presets)} under {model_dir}", file=sys.stderr)
        export_all(presets, model_dir)
    checker = Checker(model_dir.resolve(), timeout=args.timeout,
                      say=lambda text: print(text, file=sys.stderr, flush=True))
    results: list[Checked] = []
    for entry in chosen:
        start = time.monotonic()
        results.append(checker.check(entry, pinned_only=args.pinned_only))
        print(results[-1].line(), flush=True)
        # On stderr: which script is worth CI's minutes (ci/findings-smoke.sh picks one).
        print(f"... report {entry.report} took {time.monotonic() - start:.0f} s",
              file=sys.stderr, flush=True)
        if args.write:
            # After each script, not once at the end: a run of every script takes an hour,
            # and one stopped part-way keeps what it found.
            write_table(args.findings, args.scripts, results)
    if args.write:
        print(f"wrote the status table of {args.findings}", file=sys.stderr)
    if not args.gate:
        return 0
    faults += gate(results, recorded)
    for fault in faults:
        print(f"GATE: {fault}")
    return 1 if faults else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = {"list": command_list, "models": command_models, "check": command_check,
               "table": command_table}
    return command[args.command](args)
