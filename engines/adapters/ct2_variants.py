"""Public spec paths `engines.adapters.ct2_variants:FACTORY`: the variants are
engines.adapters.ct2.variants (this re-exports its `__all__`)."""

from engines.adapters.ct2.variants import *  # noqa: F403
