"""Deprecated alias of engines.adapters.vllm.variants, kept for one release (it goes in the
next): the spec `engines.adapters.vllm_variants:FACTORY` is
`engines.adapters.vllm.variants:FACTORY` now."""

from engines.adapters.vllm.variants import *  # noqa: F403
from engines.deprecated import moved

moved(__name__, "engines.adapters.vllm.variants")
