"""The conformance suite, as a test module.

Run it on any engine:

    pytest --pyargs engines.testing.conformance --engine mypkg.mymodule:make_engine

or pull it into your own tests next to a conftest.py that overrides `engine_factory`:

    from engines.testing.conformance import *  # noqa: F403

Test ids read `<engine>-<property>` (e.g. `ToyEngine-parity`), so `-k parity` picks one
property. Properties an engine declares in `expected_failed_checks` run as strict xfails.
"""

from __future__ import annotations

from engines.testing.suite import Suite

__all__ = ["test_conformance"]


def test_conformance(conformance_suite: Suite, conformance_check: str) -> None:
    """One property of DESIGN.md, checked on seed workloads and then a Hypothesis search."""
    __tracebackhide__ = True
    conformance_suite.check(conformance_check)
