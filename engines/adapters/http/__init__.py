"""Servers behind the engine protocol, over HTTP (needs the optional extra `http`: httpx).

Public spec paths: `engines.adapters.http:vllm_server` (launches vLLM's OpenAI server from
the vLLM venv, once per process) and `engines.adapters.http:from_env` (the server at
$BATCHING_ENGINE_URL), and llama.cpp's llama-server (engines.adapters.http.llama, where
$BATCHING_LLAMA_SERVER names the binary): `:llama_server` (4 slots), `:llama_server_one_slot`,
`:llama_server_cache_prompt`. The adapter is engines.adapters.http.adapter.HTTPEngine.
"""

from engines.adapters.http.adapter import HTTPEngine, ServerError, ServerStalled
from engines.adapters.http.llama import (
    llama_server,
    llama_server_cache_prompt,
    llama_server_one_slot,
)
from engines.adapters.http.servers import from_env, vllm_server
from engines.protocol import InvalidRequest

__all__ = ["HTTPEngine", "InvalidRequest", "ServerError", "ServerStalled", "from_env",
           "llama_server", "llama_server_cache_prompt", "llama_server_one_slot", "vllm_server"]
