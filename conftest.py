"""The repo's own test configuration: Hypothesis profiles (batching-dev by default, never
forced: --hypothesis-profile or HYPOTHESIS_PROFILE wins)."""

from __future__ import annotations

import os

from hypothesis import settings

from engines.testing.profiles import register_profiles

register_profiles()
# --hypothesis-profile wins (Hypothesis loads it later, in pytest_configure); otherwise
# HYPOTHESIS_PROFILE; otherwise the fast dev profile.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "batching-dev"))

pytest_plugins = ("pytester",)  # the plugin's tests run pytest inside pytest
