"""Deprecated alias of engines.adapters.ortgenai.variants, kept for one release (it goes in the
next): the spec `engines.adapters.ortgenai_variants:FACTORY` is
`engines.adapters.ortgenai.variants:FACTORY` now."""

from engines.adapters.ortgenai.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.ortgenai.variants")
