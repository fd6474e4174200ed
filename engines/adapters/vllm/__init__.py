"""vLLM's CPU engine behind engines.protocol (importing it imports vllm).

`engines.adapters.vllm:make_engine` is a public spec path: the adapter is in
engines.adapters.vllm.adapter, and this re-exports its `__all__`."""

from engines.adapters.vllm.adapter import *  # noqa: F403
