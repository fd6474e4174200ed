"""The parts of the docs that the registries can write: the list of checks in docs/usage.md
(each check, what it asserts in one sentence, what it needs to run, the features it draws
beside those every check draws) and the list of features, between marker comments, so that
a check or feature added is documented by adding it. tests/test_layout.py fails when the
docs differ from what this module writes.

    python -m engines.testing.docs            # print the generated blocks
    python -m engines.testing.docs --write    # rewrite them in docs/usage.md
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from engines.testing.checks import REGISTRY, Check
from engines.testing.features import FEATURES

__all__ = ["BLOCKS", "about", "checks_block", "features_block", "rewrite"]

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def _first_sentence(text: str | None) -> str:
    words = " ".join((text or "").split())
    found = re.match(r"(.+?[.!?])(\s|$)", words)
    return (found.group(1) if found else words).rstrip(".") + "."


def about(check: Check) -> str:
    """What the check asserts: the first sentence of its file's docstring, which starts
    "<check>: " or "<check> (<what it needs>): " (tests/test_layout.py holds every check's
    file to it)."""
    doc = " ".join((sys.modules[f"engines.testing.checks.{check.name}"].__doc__ or "").split())
    found = re.match(rf"{re.escape(check.name)}( \([^)]*\))?: (.*)", doc)
    if found is None:
        raise ValueError(f"engines/testing/checks/{check.name}.py: its docstring must start "
                         f"{check.name!r} and a colon, then what the check asserts")
    return _first_sentence(found.group(2))


def checks_block() -> str:
    lines = ["| check | asserts | needs | draws beside every check's |",
             "| --- | --- | --- | --- |"]
    for check in REGISTRY:
        needs = ", ".join(n.name for n in check.needs) or "-"
        draws = ", ".join(u.feature for u in check.draws) or "-"
        lines.append(f"| `{check.name}` | {about(check)} | {needs} | {draws} |")
    return "\n".join(lines)


def features_block() -> str:
    lines = ["| feature | drawn in | needs declared | its requests composed with |",
             "| --- | --- | --- | --- |"]
    for feature in FEATURES:
        where = "every check's workloads" if feature.everywhere else ", ".join(
            f"`{c.name}`" for c in REGISTRY if any(u.feature == feature.name for u in c.draws)
        ) or "no check"
        composes = ", ".join(f"`{name}`" for name in sorted(feature.composes)) or "-"
        lines.append(f"| `{feature.name}` | {where} | {feature.needs} | {composes} |")
    return "\n".join(lines)


BLOCKS = {"checks": checks_block, "features": features_block}


def rewrite(text: str) -> str:
    """`text` with every generated block (between `<!-- generated: NAME -->` and
    `<!-- end generated: NAME -->`) written anew."""
    for name, make in BLOCKS.items():
        start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
        if start not in text or end not in text:
            raise ValueError(f"docs/usage.md has no {start} ... {end} block")
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engines.testing.docs")
    parser.add_argument("--write", action="store_true", help="rewrite docs/usage.md's blocks")
    args = parser.parse_args(argv)
    if args.write:
        USAGE.write_text(rewrite(USAGE.read_text()))
        return 0
    for make in BLOCKS.values():
        print(make(), end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
