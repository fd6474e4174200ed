"""The repo's own test configuration.

It loads no Hypothesis profile: with an editable install this file is imported by every run
that collects engines.testing.conformance from the source tree, wherever it is run from, and
a profile loaded here would override the one the user asked for. The suite's checks get their
profile from engines.testing.profiles' rule; the repo's own default (batching-dev, on CI
machines too) is the `conformance_profile` ini key in pyproject.toml.
"""

from __future__ import annotations

pytest_plugins = ("pytester",)  # the plugin's tests run pytest inside pytest
