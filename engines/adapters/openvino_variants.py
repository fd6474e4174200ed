"""Deprecated alias of engines.adapters.openvino.variants, kept for one release (it goes in the
next): the spec `engines.adapters.openvino_variants:FACTORY` is
`engines.adapters.openvino.variants:FACTORY` now."""

from engines.adapters.openvino.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.openvino.variants")
