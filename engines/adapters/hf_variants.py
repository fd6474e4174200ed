"""Public spec paths `engines.adapters.hf_variants:FACTORY`: the variants are
engines.adapters.hf.variants (this re-exports its `__all__`)."""

from engines.adapters.hf.variants import *  # noqa: F403
