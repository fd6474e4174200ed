"""Wrappers that make third-party engines speak engines.protocol: one subpackage per library
(hf: transformers' continuous batching; vllm: vLLM's CPU engine), and what they share in
common. The public spec paths are engines.adapters.hf_continuous, .hf_variants, .vllm and
.vllm_variants."""
