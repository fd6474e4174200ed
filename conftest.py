"""The repo's own test configuration: Hypothesis profiles (dev by default, never forced)."""

from __future__ import annotations

import os

from hypothesis import settings

from engines.testing.profiles import register_profiles

register_profiles()
# The usual selection: --hypothesis-profile wins (Hypothesis loads it later, in
# pytest_configure); otherwise HYPOTHESIS_PROFILE; otherwise the fast dev profile.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

pytest_plugins = ("pytester",)  # tests/test_conformance_plugin.py runs pytest inside pytest
