"""The status table at the top of docs/findings.md: rendered from the ledger's results, read
back, merged with a partial check, and rewritten in place (twice the same gives the same)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engines.findings.ledger import FINDINGS, SCRIPTS, Entry, entries
from engines.findings.reports import parse_reports
from engines.findings.run import Outcome
from engines.findings.table import (
    BEGIN,
    COLUMNS,
    END,
    NO_UPSTREAM,
    NOT_CHECKED,
    OLD_COLUMNS,
    merge,
    outcome_of,
    parse_rows,
    render,
    replace_block,
)

DOC = """# What the suite found

Opening paragraph.

## What the suite ran

Text.

## Reports

### 7. OpenVINO GenAI: prefix caching under a split-fuse budget gives wrong greedy tokens

Body.

### 45. CTranslate2: with several end tokens, a beam search continues a beam past an end token

Body.
"""

REPORTS = parse_reports(DOC)
ENTRY = Entry(script=Path("docs/findings/r07_openvino_prefix.py"), report=7,
              library="openvino-genai", venv="openvino", presets=("tiny",),
              workaround="variants.py: prefix caching off",
              upstream="not filed (nearest: openvinotoolkit/openvino.genai#4047)")


def table_text(updates: dict[int, tuple[str | None, str | None]], text: str = DOC,
               today: str = "2026-12-07", entry: Entry = ENTRY) -> str:
    rows = merge(REPORTS, [entry], parse_rows(text), updates, today)
    return replace_block(text, render(rows))


def test_the_table_goes_before_the_first_section_and_lists_every_report() -> None:
    text = table_text({7: ("reproduces on 2026.4.1", "reproduces on 2026.5.0")})
    assert text.index(BEGIN) > text.index("Opening paragraph.")
    assert text.index(END) < text.index("## What the suite ran")
    rows = parse_rows(text)
    assert sorted(rows) == [7, 45]
    assert rows[7].script == "r07_openvino_prefix.py" and rows[7].checked == "2026-12-07"
    assert rows[7].pinned == "reproduces on 2026.4.1"
    assert rows[7].anchor == "7-openvino-genai-prefix-caching-under-a-split-fuse-budget-" \
                             "gives-wrong-greedy-tokens"
    assert rows[45].script is None and rows[45].pinned == NOT_CHECKED
    assert rows[45].library == "CTranslate2"
    # The rest of the document is untouched.
    assert text.replace(text[text.index(BEGIN):text.index(END) + len(END) + 1], "") \
        .replace("\n\n\n", "\n\n") == DOC


def test_the_rewrite_is_idempotent() -> None:
    once = table_text({7: ("reproduces on 2026.4.1", "fixed in 2026.5.0")})
    assert table_text({}, once) == once
    assert table_text({7: ("reproduces on 2026.4.1", "fixed in 2026.5.0")}, once) == once


def test_a_partial_check_keeps_the_other_cells() -> None:
    once = table_text({7: ("reproduces on 2026.4.1", "fixed in 2026.5.0")})
    # --pinned-only: the newest cell (and its date moves, as the row was checked).
    twice = table_text({7: ("cannot run: no venv", None)}, once, today="2026-12-08")
    row = parse_rows(twice)[7]
    assert (row.pinned, row.newest, row.checked) == ("cannot run: no venv",
                                                     "fixed in 2026.5.0", "2026-12-08")
    assert twice.count(BEGIN) == 1 and twice.count(END) == 1


def test_a_pipe_in_a_reason_does_not_break_the_row() -> None:
    text = table_text({7: ("cannot run: a | b\nc", None)})
    assert parse_rows(text)[7].pinned == "cannot run: a / b c"


def test_outcomes_of_cells() -> None:
    assert outcome_of("reproduces on 0.32.0") is Outcome.REPRODUCES
    assert outcome_of("fixed in 0.33.0; our workaround can go") is Outcome.FIXED
    assert outcome_of("cannot run: no venv") is Outcome.CANNOT_RUN
    assert outcome_of(NOT_CHECKED) is None


def test_the_repository_document_has_at_most_one_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "findings.md").read_text(encoding="utf-8")
    assert text.count(BEGIN) <= 1 and text.count(BEGIN) == text.count(END)
    if BEGIN in text:
        # Regenerating it from what it says changes nothing: it was not hand-edited.
        rows = parse_rows(text)
        assert render(list(rows.values())) == text[text.index(BEGIN):
                                                   text.index(END) + len(END) + 1]


def test_the_upstream_column_is_the_ledgers() -> None:
    text = table_text({7: ("reproduces on 2026.4.1", None)})
    assert "| " + " | ".join(COLUMNS) + " |" in text
    rows = parse_rows(text)
    assert rows[7].upstream == "not filed (nearest: openvinotoolkit/openvino.genai#4047)"
    # A report without a script, or a LEDGER without the key, says so.
    assert rows[45].upstream == NO_UPSTREAM
    assert parse_rows(table_text({}, text, entry=replace(ENTRY, upstream=None)))[7].upstream \
        == NO_UPSTREAM


def test_a_changed_upstream_status_changes_only_its_cell() -> None:
    once = table_text({7: ("reproduces on 2026.4.1", "fixed in 2026.5.0")})
    moved = replace(ENTRY, upstream="filed: openvinotoolkit/openvino.genai#5000 (open)")
    # No check ran: the results and the date stay, the LEDGER's status replaces the old one.
    twice = table_text({}, once, today="2026-12-09", entry=moved)
    before, after = parse_rows(once)[7], parse_rows(twice)[7]
    assert after.upstream == "filed: openvinotoolkit/openvino.genai#5000 (open)"
    assert replace(after, upstream=before.upstream) == before
    assert table_text({}, twice, today="2026-12-10", entry=moved) == twice


def test_a_pipe_in_the_upstream_status_does_not_break_the_row() -> None:
    text = table_text({}, entry=replace(ENTRY, upstream="known | duplicate"))
    assert parse_rows(text)[7].upstream == "known / duplicate"
    assert parse_rows(text)[7].pinned == NOT_CHECKED


def test_a_table_without_the_upstream_column_is_read_and_gains_it() -> None:
    new = table_text({7: ("reproduces on 2026.4.1", "fixed in 2026.5.0")})
    # The same table as it was written before the column existed.
    old_lines = []
    for line in new.splitlines(keepends=True):
        cells = line.rstrip("\n").strip().strip("|").split("|") if line.startswith("|") else []
        if len(cells) == len(COLUMNS):
            del cells[COLUMNS.index("upstream")]
            line = "|" + "|".join(cells) + "|\n"
        old_lines.append(line)
    old = "".join(old_lines)
    assert "| " + " | ".join(OLD_COLUMNS) + " |" in old and "upstream |" not in old
    rows = parse_rows(old)
    # The gate reads the pinned results from it as before.
    assert outcome_of(rows[7].pinned) is Outcome.REPRODUCES
    assert (rows[7].newest, rows[7].checked) == ("fixed in 2026.5.0", "2026-12-07")
    assert rows[7].upstream == NO_UPSTREAM
    # Rewritten without a check, it is the current table.
    assert table_text({}, old) == new


def test_the_repository_table_shows_every_ledgers_upstream_status() -> None:
    text = FINDINGS.read_text(encoding="utf-8")
    if BEGIN not in text:
        return
    rows = parse_rows(text)
    for entry in entries(SCRIPTS)[0]:
        assert entry.upstream is not None
        assert rows[entry.report].upstream == " ".join(entry.upstream.replace("|", "/").split()), \
            f"report {entry.report}: the table's upstream cell is not its LEDGER's: run " \
            f"`python -m engines.findings table`"
