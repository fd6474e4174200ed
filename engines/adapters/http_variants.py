"""Deprecated alias of engines.adapters.http.variants, kept for one release (it goes in the
next): the spec `engines.adapters.http_variants:FACTORY` is
`engines.adapters.http.variants:FACTORY` now."""

from engines.adapters.http.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.http.variants")
