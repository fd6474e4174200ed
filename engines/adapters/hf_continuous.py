"""Public spec path `engines.adapters.hf_continuous:make_engine`: the adapter is
engines.adapters.hf.continuous (this re-exports its `__all__`)."""

from engines.adapters.hf.continuous import *  # noqa: F403
