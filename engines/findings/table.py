"""The status table at the top of docs/findings.md: one row per report, with its repro script
and what the ledger last saw at the pinned version and at the newest release.

It lives between two marker comments and is regenerated from the ledger's results, never
edited by hand; a check of some libraries keeps the other rows as they were, so the table
is read back (`parse_rows`) before it is rewritten (`render`, `replace_block`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from engines.findings.ledger import Entry
from engines.findings.reports import Report
from engines.findings.run import Outcome

BEGIN = ("<!-- findings-ledger: begin. `python -m engines.findings check --write` "
         "regenerates this block; do not edit it by hand -->")
END = "<!-- findings-ledger: end -->"
NOT_CHECKED = "not checked"
NO_SCRIPT = "no script yet"
COLUMNS = ("report", "library", "repro", "pinned", "newest release", "checked")

INTRO = """## The ledger: does each report still reproduce?

Each report's standalone repro ([findings/](findings/README.md)) as `python -m engines.findings
check --write` last ran it: at the version this project pins (CI's venv) and at the newest
release on the package index. "fixed" at the newest release with a workaround in our adapter
means that workaround can go once the pin moves."""


@dataclass(frozen=True)
class Row:
    report: int
    library: str
    script: str | None          # the script's file name under docs/findings/
    pinned: str = NOT_CHECKED   # cell text: Result.describe() of the last check
    newest: str = NOT_CHECKED
    checked: str = ""           # the date of the last check (YYYY-MM-DD)
    anchor: str = ""


def _cell(text: str) -> str:
    # A pipe would split the cell; a newline would end the row.
    return " ".join(text.replace("|", "/").split())


def render(rows: list[Row]) -> str:
    """The whole block, markers included, rows in report order."""
    lines = [BEGIN, INTRO, "", "| " + " | ".join(COLUMNS) + " |",
             "|" + " --- |" * len(COLUMNS)]
    for row in sorted(rows, key=lambda r: r.report):
        report = f"[{row.report}](#{row.anchor})" if row.anchor else str(row.report)
        script = f"[{row.script}](findings/{row.script})" if row.script else NO_SCRIPT
        cells = (report, row.library, script, row.pinned, row.newest, row.checked or "-")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def block_span(text: str) -> tuple[int, int] | None:
    """Where the block is in `text` (start of BEGIN's line, end of END's line + newline)."""
    start = text.find(BEGIN.split(".")[0])
    if start < 0:
        return None
    end = text.find(END, start)
    if end < 0:
        raise ValueError("docs/findings.md: the ledger's begin marker has no end marker")
    end += len(END)
    if text[end:end + 1] == "\n":
        end += 1
    return start, end


def parse_rows(text: str) -> dict[int, Row]:
    """The rows of the block in `text` (none where there is no block)."""
    span = block_span(text)
    if span is None:
        return {}
    rows: dict[int, Row] = {}
    for line in text[span[0]:span[1]].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        found = re.match(r"^\[?(\d+)\]?(?:\(#([^)]*)\))?$", cells[0]) if line.startswith("|") \
            else None
        if found is None or len(cells) != len(COLUMNS):
            continue  # the header, the rule, or not a row
        script = re.match(r"^\[([^\]]+)\]", cells[2])
        rows[int(found.group(1))] = Row(
            report=int(found.group(1)), library=cells[1],
            script=script.group(1) if script else None, pinned=cells[3], newest=cells[4],
            checked="" if cells[5] == "-" else cells[5], anchor=found.group(2) or "")
    return rows


def outcome_of(cell: str) -> Outcome | None:
    """The outcome a cell records ('reproduces on 0.32.0' -> REPRODUCES); None for 'not
    checked' and the like."""
    for outcome in Outcome:
        if cell.startswith(outcome.value):
            return outcome
    return None


def merge(reports: Mapping[int, Report], entries: list[Entry], old: Mapping[int, Row],
          updates: Mapping[int, tuple[str | None, str | None]], today: str) -> list[Row]:
    """The table's rows: every report of docs/findings.md and every script's, each keeping its
    old cells unless `updates` (report -> new pinned cell, new newest cell; None keeps the
    old) has new ones, dated `today` where it has."""
    scripts = {entry.report: entry for entry in entries}
    rows: list[Row] = []
    for number in sorted(set(reports) | set(scripts)):
        entry, report = scripts.get(number), reports.get(number)
        library = entry.library if entry else report.library if report else "?"
        row = old.get(number) or Row(number, library, None)
        row = replace(row, library=library, script=entry.script.name if entry else None,
                      anchor=report.anchor if report else "")
        if entry is None:
            # A script that went away leaves no verdict behind to show as current.
            row = replace(row, pinned=NOT_CHECKED, newest=NOT_CHECKED, checked="")
        pinned, newest = updates.get(number, (None, None))
        if entry is not None and (pinned is not None or newest is not None):
            row = replace(row, pinned=pinned if pinned is not None else row.pinned,
                          newest=newest if newest is not None else row.newest, checked=today)
        rows.append(row)
    return rows


def replace_block(text: str, block: str) -> str:
    """`text` with its block replaced by `block`; where it has none, `block` goes before the
    first `## ` heading (after the document's opening paragraphs)."""
    span = block_span(text)
    if span is not None:
        return text[:span[0]] + block + text[span[1]:]
    heading = re.search(r"^## ", text, re.MULTILINE)
    at = heading.start() if heading else len(text)
    before = text[:at].rstrip("\n")
    return (before + "\n\n" if before else "") + block + "\n" + text[at:]
