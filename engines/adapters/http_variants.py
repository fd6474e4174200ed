"""Public spec paths `engines.adapters.http_variants:FACTORY`: the vLLM server variants are
engines.adapters.http.variants (this re-exports its `__all__`)."""

from engines.adapters.http.variants import *  # noqa: F403
