"""The whole conformance suite on ToyEngine: `pytest examples/`."""

from engines.testing.conformance import *  # noqa: F403

conformance_engine_name = "ToyEngine"  # test ids read ToyEngine-<property>
