"""Deprecated alias of engines.paged.variants, kept for one release (it goes in the next): the spec
`engines.paged_variants:FACTORY` is `engines.paged.variants:FACTORY` now."""

from engines.deprecated import moved
from engines.paged.variants import *  # noqa: F403

moved(__name__, "engines.paged.variants")
