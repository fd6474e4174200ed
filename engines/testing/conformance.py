"""The conformance suite, as a test module.

Run it on any engine:

    pytest --pyargs engines.testing.conformance --engine mypkg.mymodule:make_engine

or pull it into your own tests next to a conftest.py that overrides `engine_factory`:

    from engines.testing.conformance import *  # noqa: F403

Test ids read `<engine>-<check>` (e.g. `ToyEngine-parity`), so `-k parity` picks one check.
Checks an engine declares in `expected_failed_checks` run as strict xfails.
"""

from __future__ import annotations

import pytest

from engines.testing.context import SuiteContext

__all__ = ["test_conformance"]


def test_conformance(conformance_context: SuiteContext, conformance_check: str,
                     request: pytest.FixtureRequest) -> None:
    """One check (docs/architecture.md), on seed workloads and then a Hypothesis search."""
    __tracebackhide__ = True
    if conformance_check == "stateful":
        from engines.testing.stateful import run_engine_machine

        run_engine_machine(conformance_context)
        return
    from engines.testing.plugin import COVERAGE
    from engines.testing.search import search

    coverage = search(conformance_context, conformance_check)
    request.node.user_properties.append((COVERAGE, coverage.as_dict()))
