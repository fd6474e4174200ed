"""Public spec paths `engines.adapters.openvino_variants:FACTORY`: the variants are
engines.adapters.openvino.variants (this re-exports its `__all__`)."""

from engines.adapters.openvino.variants import *  # noqa: F403
