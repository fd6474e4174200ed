"""Deprecated alias of engines.adapters.hf, kept for one release (it goes in the next): the spec
`engines.adapters.hf_continuous:FACTORY` is `engines.adapters.hf:FACTORY` now."""

from engines.adapters.hf.adapter import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.hf")
