"""The status table at the top of docs/findings.md: one row per report, with its repro script
and what the ledger last saw at the pinned version and at the newest release.

It lives between two marker comments and is regenerated from the ledger's results, never
edited by hand; a check of some libraries keeps the other rows as they were, so the table
is read back (`parse_rows`) before it is rewritten (`render`, `replace_block`). Its "upstream"
column is each script's LEDGER["upstream"] (the report's tracker status), taken afresh at
every rewrite, so `python -m engines.findings table` can redo the block without running a
script.
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
NO_UPSTREAM = "not recorded"   # a script whose LEDGER has no "upstream", or no script
COLUMNS = ("report", "library", "repro", "pinned", "newest release", "upstream", "checked")
# The columns of the table before "upstream" was added: a block of that layout is still read
# (its rows keep their results), and the next rewrite adds the column.
OLD_COLUMNS = ("report", "library", "repro", "pinned", "newest release", "checked")

INTRO = """## The ledger: does each report still reproduce?

Each report's standalone repro ([findings/](findings/README.md)) as `python -m engines.findings
check --write` last ran it: at the version this project pins (CI's venv) and at the newest
release on the package index. "fixed" at the newest release with a workaround in our adapter
means that workaround can go once the pin moves. "upstream" is where the report stands on
the library's tracker, as the report says (its script's LEDGER; `python -m engines.findings
table` rewrites this block from the LEDGERs without running the scripts)."""


@dataclass(frozen=True)
class Row:
    report: int
    library: str
    script: str | None          # the script's file name under docs/findings/
    pinned: str = NOT_CHECKED   # cell text: Result.describe() of the last check
    newest: str = NOT_CHECKED
    checked: str = ""           # the date of the last check (YYYY-MM-DD)
    anchor: str = ""
    upstream: str = NO_UPSTREAM  # the script's LEDGER["upstream"]


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
        cells = (report, row.library, script, row.pinned, row.newest, row.upstream,
                 row.checked or "-")
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
    # The header names the columns: the current layout, or the one before "upstream".
    columns: tuple[str, ...] = COLUMNS
    for line in text[span[0]:span[1]].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and tuple(cells) in (COLUMNS, OLD_COLUMNS):
            columns = tuple(cells)
            continue
        found = re.match(r"^\[?(\d+)\]?(?:\(#([^)]*)\))?$", cells[0]) if line.startswith("|") \
            else None
        if found is None or len(cells) != len(columns):
            continue  # the rule, or not a row
        cell = dict(zip(columns, cells, strict=True))
        script = re.match(r"^\[([^\]]+)\]", cell["repro"])
        rows[int(found.group(1))] = Row(
            report=int(found.group(1)), library=cell["library"],
            script=script.group(1) if script else None, pinned=cell["pinned"],
            newest=cell["newest release"],
            checked="" if cell["checked"] == "-" else cell["checked"],
            anchor=found.group(2) or "", upstream=cell.get("upstream", NO_UPSTREAM))
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
    old) has new ones, dated `today` where it has. The upstream cell is always the script's
    LEDGER's (NO_UPSTREAM where it has none): the LEDGER, not the table, records it."""
    scripts = {entry.report: entry for entry in entries}
    rows: list[Row] = []
    for number in sorted(set(reports) | set(scripts)):
        entry, report = scripts.get(number), reports.get(number)
        library = entry.library if entry else report.library if report else "?"
        row = old.get(number) or Row(number, library, None)
        row = replace(row, library=library, script=entry.script.name if entry else None,
                      anchor=report.anchor if report else "",
                      upstream=entry.upstream if entry and entry.upstream else NO_UPSTREAM)
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
