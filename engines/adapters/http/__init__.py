"""Servers behind the engine protocol, over HTTP (needs the optional extra `http`: httpx).

Public spec paths: `engines.adapters.http:from_env` (the user's server, at
$BATCHING_ENGINE_URL), and the servers the tests launch, once per process:
`engines.adapters.http:vllm_server` (vLLM's OpenAI server from the vLLM venv) and
`:llama_server` (llama.cpp's llama-server, the binary $BATCHING_LLAMA_SERVER names), with
`:llama_server_one_slot` and `:llama_server_cache_prompt`; every configuration is in
engines.adapters.http.variants. The adapter is engines.adapters.http.adapter.HTTPEngine; a
URL spec (`--engine http://HOST:PORT?vocab_size=N`) is engines.adapters.http.url.
"""

from engines.adapters.http.adapter import HTTPEngine, ServerError, ServerStalled, from_env
from engines.adapters.http.variants import (
    llama_server,
    llama_server_cache_prompt,
    llama_server_one_slot,
    vllm_server,
)
from engines.protocol import InvalidRequest

__all__ = ["HTTPEngine", "InvalidRequest", "ServerError", "ServerStalled", "from_env",
           "llama_server", "llama_server_cache_prompt", "llama_server_one_slot", "vllm_server"]
