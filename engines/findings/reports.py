"""The report headings of docs/findings.md (`### 7. OpenVINO GenAI: ...`): which reports exist,
their titles, and the anchors GitHub gives them, so the status table can link each report."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Only level-3 headings that start with a number: the reports. Other `###` headings (the
# suite's runs above "## Reports") have no number and are not reports.
HEADING = re.compile(r"^### (\d+)\. (.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Report:
    number: int
    title: str      # the heading's text after "N. "

    @property
    def library(self) -> str:
        """The library as the heading names it: the text before its first colon
        ("OpenVINO GenAI", "vLLM CPU"), used where a report has no script to say it."""
        return self.title.split(":", 1)[0].strip()

    @property
    def anchor(self) -> str:
        """GitHub's anchor for the heading: lower case, punctuation but hyphens and
        underscores dropped, each space a hyphen."""
        text = f"{self.number}. {self.title}".lower()
        return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def parse_reports(markdown: str) -> dict[int, Report]:
    """The reports of docs/findings.md's text, by number (the first heading of a number wins;
    a duplicate number is a fault of the document, which tests/findings checks)."""
    reports: dict[int, Report] = {}
    for match in HEADING.finditer(markdown):
        number = int(match.group(1))
        reports.setdefault(number, Report(number, match.group(2)))
    return reports
