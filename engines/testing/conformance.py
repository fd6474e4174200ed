"""The conformance suite, as a test module.

Run it on any engine:

    pytest --pyargs engines.testing.conformance --engine mypkg.mymodule:make_engine

or pull it into your own tests next to a conftest.py that overrides `engine_factory`:

    from engines.testing.conformance import *  # noqa: F403

Test ids read `<engine>-<check>` (e.g. `ToyEngine-parity`), so `-k parity` picks one check.
Checks an engine declares in `expected_failed_checks` run as strict xfails. The checks run
under the Hypothesis profile that engines.testing.profiles' rule picks, whichever way the
suite was pulled in.
"""

from __future__ import annotations

import pytest

from engines.testing.context import SuiteContext

__all__ = ["test_conformance"]


def test_conformance(conformance_context: SuiteContext, conformance_check: str,
                     request: pytest.FixtureRequest) -> None:
    """One check (docs/architecture.md), on seed workloads and then a Hypothesis search."""
    __tracebackhide__ = True
    from engines.testing.plugin import ROUTED, run_options
    from engines.testing.progress_lines import watching
    from engines.testing.routing import routed_during
    from engines.testing.shrink_budget import bounded_shrinking

    options = run_options(request.config)
    # Progress lines while it runs; its shrinking bounded, the report saying where it was cut;
    # the requests each reference served alone meanwhile recorded for the summary.
    with watching(request.config, f"{conformance_context.name}-{conformance_check}",
                  options.progress_interval), bounded_shrinking(options.shrink_budget), \
            routed_during(conformance_context.judge.reference, request.node.user_properties,
                          ROUTED):
        _check_or_finding(conformance_context, conformance_check, request)


def _check_or_finding(ctx: SuiteContext, check: str, request: pytest.FixtureRequest) -> None:
    __tracebackhide__ = True
    from engines.testing.crash import EngineCrashed
    from engines.testing.judging import Violation
    from engines.testing.report import crash_finding

    try:
        _run_check(ctx, check, request)
        return
    except EngineCrashed as crash:  # outside a judged run: the oracle's, as workloads are drawn
        finding = crash_finding(crash)
    except Violation as failure:
        if failure.prop != EngineCrashed.prop:
            raise
        finding = crash_finding(failure)
    # An engine's exception reads as the finding alone (its sentence, the engine's frames, the
    # script that raises it): raised here, outside the except block, with the suite's frames
    # hidden and no chained traceback.
    raise finding


def _run_check(ctx: SuiteContext, check: str, request: pytest.FixtureRequest) -> None:
    __tracebackhide__ = True
    from engines.testing.checks import check_named
    from engines.testing.plugin import COVERAGE, profile_in_force

    settings = profile_in_force(request.config).settings
    if check_named(check).runs == "machine":
        from engines.testing.stateful import run_engine_machine

        run_engine_machine(ctx, settings=settings)
        return
    from engines.testing.search import search

    coverage = search(ctx, check, settings=settings)
    request.node.user_properties.append((COVERAGE, coverage.as_dict()))
