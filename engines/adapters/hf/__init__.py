"""transformers' continuous batching behind engines.protocol (importing it imports torch and
transformers; the main venv has them), and transformers' own generate() as a baseline for the
bench (engines.adapters.hf.generate).

`engines.adapters.hf:make_engine` is a public spec path: the adapter is in
engines.adapters.hf.adapter, and this re-exports its `__all__`; its configurations are
engines.adapters.hf.variants."""

from engines.adapters.hf.adapter import *  # noqa: F403
