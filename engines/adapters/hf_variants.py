"""Deprecated alias of engines.adapters.hf.variants, kept for one release (it goes in the next):
the spec `engines.adapters.hf_variants:FACTORY` is `engines.adapters.hf.variants:FACTORY` now."""

from engines.adapters.hf.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.hf.variants")
