"""Wrappers that make third-party engines speak engines.protocol: one folder per library, each
of one shape (adapter.py, variants.py, convert.py where the library needs a conversion; see
docs/architecture.md), and what they share in common/:

- hf: transformers' continuous batching (and its generate() baseline);
- vllm: vLLM's CPU engine, in-process;
- openvino: OpenVINO GenAI's continuous batching;
- ortgenai: onnxruntime-genai's Engine;
- ct2: CTranslate2's Generator;
- http: servers over HTTP (vLLM's OpenAI server, llama.cpp's llama-server, any URL).

The public spec paths are `engines.adapters.LIB:make_engine` (http: `:vllm_server`,
`:llama_server`, `:from_env`) and `engines.adapters.LIB.variants:FACTORY`. Importing this
package imports nothing: each library is imported only with its folder."""
