"""batching-engines: reference LLM batching engines and a conformance suite for any engine."""

__version__ = "0.1.0"
