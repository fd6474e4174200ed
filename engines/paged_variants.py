"""Public spec paths `engines.paged_variants:FACTORY`: the variants are engines.paged.variants
(this re-exports its `__all__`)."""

from engines.paged.variants import *  # noqa: F403
