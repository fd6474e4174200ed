"""Deprecated alias of engines.slot.static, kept for one release (it goes in the next): the spec
`engines.static:FACTORY` is `engines.slot.static:FACTORY` now."""

from engines.deprecated import moved
from engines.slot.static import StaticBatchEngine as StaticBatchEngine

moved(__name__, "engines.slot.static")
