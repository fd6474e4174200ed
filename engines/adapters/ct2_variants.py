"""Deprecated alias of engines.adapters.ct2.variants, kept for one release (it goes in the next):
the spec `engines.adapters.ct2_variants:FACTORY` is `engines.adapters.ct2.variants:FACTORY` now."""

from engines.adapters.ct2.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.ct2.variants")
