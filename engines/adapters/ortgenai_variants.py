"""Public spec paths `engines.adapters.ortgenai_variants:FACTORY`: the variants are
engines.adapters.ortgenai.variants (this re-exports its `__all__`)."""

from engines.adapters.ortgenai.variants import *  # noqa: F403
