"""The ledger's reading of the scripts' LEDGER headers, and the repository's scripts against
docs/findings.md (every script's header valid, named for its report, and the report exists)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.findings.ledger import (
    FINDINGS,
    REPO,
    SCRIPTS,
    Entry,
    LedgerError,
    entries,
    parse_ledger,
    read_entry,
    script_paths,
)
from engines.findings.reports import parse_reports

HEADER = '''"""A repro."""

LEDGER = {
    "report": 7,
    "library": "openvino-genai",
    "venv": "openvino",
    "presets": ["tiny", "tiny-llama-rope"],
    "workaround": "engines/adapters/openvino/variants.py: "
                  "prefix caching stays off",
}

import openvino_genai  # noqa: E402  (never imported by the ledger)
'''


def test_a_header_is_read_without_importing_the_script(tmp_path: Path) -> None:
    script = tmp_path / "r07_openvino_prefix.py"
    script.write_text(HEADER)
    entry = read_entry(script)
    assert entry == Entry(script=script, report=7, library="openvino-genai", venv="openvino",
                          presets=("tiny", "tiny-llama-rope"),
                          workaround="engines/adapters/openvino/variants.py: prefix caching "
                                     "stays off")
    assert entry.needs == () and entry.version is None


def test_optional_keys() -> None:
    source = HEADER.replace('"presets"', '"needs": ["transformers"], "version": "5.16.0",\n'
                                         '    "presets"')
    entry = parse_ledger(source, Path("r07_x.py"))
    assert entry.needs == ("transformers",) and entry.version == "5.16.0"


def test_the_upstream_status_is_optional_and_read_as_a_string() -> None:
    assert parse_ledger(HEADER, Path("r07_x.py")).upstream is None
    source = HEADER.replace('"presets"', '"upstream": "duplicate of "\n'
                                         '                "owner/repo#12 ",\n    "presets"')
    assert parse_ledger(source, Path("r07_x.py")).upstream == "duplicate of owner/repo#12"


@pytest.mark.parametrize("value", ['""', '"   "', "None", "12", '["not filed"]',
                                   '"not filed\\nyet"'])
def test_a_malformed_upstream_status_is_refused(value: str) -> None:
    source = HEADER.replace('"presets"', f'"upstream": {value},\n    "presets"')
    with pytest.raises(LedgerError, match=r"LEDGER\['upstream'\] must be a non-empty one-line"):
        parse_ledger(source, Path("r07_x.py"))


@pytest.mark.parametrize(("edit", "fault"), [
    (lambda s: s.replace("LEDGER =", "HEADER ="), "no top-level LEDGER"),
    (lambda s: s.replace('"report": 7', '"report": SEVEN'), "not a literal"),
    (lambda s: s.replace('"report": 7', '"report": "7"'), "positive int"),
    (lambda s: s.replace('    "venv": "openvino",\n', ""), "lacks ['venv']"),
    (lambda s: s.replace('"venv"', '"need": [], "venv"'), "unknown keys ['need']"),
    (lambda s: s.replace('["tiny", "tiny-llama-rope"]', '"tiny"'), "list of non-empty"),
    (lambda s: s.replace('"workaround": "engines', '"workaround": 3 or "engines'),
     "not a literal"),
    (lambda s: s.replace("LEDGER = {", "LEDGER = ["), "not valid Python"),
])
def test_malformed_headers_are_refused(edit: object, fault: str) -> None:
    assert callable(edit)
    with pytest.raises(LedgerError, match=fault.replace("[", r"\[").replace("]", r"\]")):
        parse_ledger(edit(HEADER), Path("r07_x.py"))


def test_the_file_name_must_carry_the_report_number(tmp_path: Path) -> None:
    script = tmp_path / "r08_openvino_prefix.py"
    script.write_text(HEADER)
    with pytest.raises(LedgerError, match="named for report 8 but its LEDGER says report 7"):
        read_entry(script)


def test_one_broken_header_does_not_hide_the_others(tmp_path: Path) -> None:
    (tmp_path / "r07_openvino_prefix.py").write_text(HEADER)
    (tmp_path / "r10_ortgenai_batch.py").write_text("LEDGER = None\n")
    (tmp_path / "README.md").write_text("not a script")
    (tmp_path / "run_helper.py").write_text("not a script either")
    good, bad = entries(tmp_path)
    assert [entry.report for entry in good] == [7]
    assert len(bad) == 1 and "r10_ortgenai_batch.py" in str(bad[0])


def test_scripts_are_in_report_order(tmp_path: Path) -> None:
    for name in ("r10_a_x.py", "r9_b_x.py", "r07_c_x.py"):
        (tmp_path / name).write_text("")
    assert [p.name for p in script_paths(tmp_path)] == ["r07_c_x.py", "r9_b_x.py",
                                                        "r10_a_x.py"]


def test_selection_by_library_or_venv() -> None:
    entry = parse_ledger(HEADER, Path("r07_x.py"))
    assert entry.matches([]) and entry.matches(["openvino"]) and entry.matches(["OpenVINO-GenAI"])
    assert not entry.matches(["ct2"])


# The repository's own scripts, as other sessions add them: each must be readable by the
# ledger and point at a report that exists, or `check` would skip it or mislabel its row.

def test_every_script_in_the_repository_has_a_valid_ledger() -> None:
    good, bad = entries(SCRIPTS)
    assert not bad, "\n".join(map(str, bad))
    reports = parse_reports(FINDINGS.read_text(encoding="utf-8"))
    for entry in good:
        assert entry.report in reports, f"{entry.script.name}: no report {entry.report} in " \
                                        f"docs/findings.md"
        venv = entry.venv
        assert venv == "main" or (REPO / "ci" / f"{venv}-env.sh").is_file(), \
            f"{entry.script.name}: no ci/{venv}-env.sh for its venv {venv!r}"


def test_every_script_in_the_repository_says_where_its_report_stands_upstream() -> None:
    # The status table's "upstream" column (issue 53): taken from the report's tracker lines.
    good, _ = entries(SCRIPTS)
    assert good
    missing = [entry.script.name for entry in good if entry.upstream is None]
    assert not missing, f"LEDGER without \"upstream\": {missing}"


def test_the_report_numbers_of_docs_findings_are_unique() -> None:
    text = FINDINGS.read_text(encoding="utf-8")
    numbers = [line.split(".")[0] for line in text.splitlines()
               if line.startswith("### ") and line[4:5].isdigit()]
    assert len(numbers) == len(set(numbers))
