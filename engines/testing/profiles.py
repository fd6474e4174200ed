"""Hypothesis profiles for the suite, under names of their own: batching-dev, batching-ci and
batching-thorough. Hypothesis' own profiles (default, ci, ...) are never touched, and these
are registered only when a run asks for one (the plugin does it before Hypothesis loads the
profile named by --hypothesis-profile) or a conftest.py calls register_profiles().
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

__all__ = ["PROFILES", "register_profiles"]

PROFILES = ("batching-dev", "batching-ci", "batching-thorough")
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def register_profiles() -> None:
    # dev: a laptop run in seconds; the seed workloads carry the known-hard cases.
    settings.register_profile(
        "batching-dev", max_examples=4, stateful_step_count=12, deadline=None,
        suppress_health_check=_SLOW,
    )
    # ci: derandomized so a run is reproducible from the log, more examples, and the
    # @reproduce_failure blob printed beside the runnable snippet.
    settings.register_profile(
        "batching-ci", max_examples=40, stateful_step_count=30, deadline=None,
        derandomize=True, print_blob=True, suppress_health_check=_SLOW, database=None,
    )
    # thorough: a nightly hunt.
    settings.register_profile(
        "batching-thorough", max_examples=400, stateful_step_count=60, deadline=None,
        print_blob=True, suppress_health_check=_SLOW,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )
