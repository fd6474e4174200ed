"""Deprecated alias of engines.slot.continuous, kept for one release (it goes in the next): the
spec `engines.continuous:FACTORY` is `engines.slot.continuous:FACTORY` now."""

from engines.deprecated import moved
from engines.slot.continuous import ContinuousBatchEngine as ContinuousBatchEngine

moved(__name__, "engines.slot.continuous")
