"""Public spec paths `engines.adapters.vllm_variants:FACTORY`: the variants are
engines.adapters.vllm.variants (this re-exports its `__all__`)."""

from engines.adapters.vllm.variants import *  # noqa: F403
