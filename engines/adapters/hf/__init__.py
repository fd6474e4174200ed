"""transformers' continuous batching behind engines.protocol. Public spec paths:
engines.adapters.hf_continuous and engines.adapters.hf_variants."""
