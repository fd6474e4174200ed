"""The conformance suite for any engine that speaks engines.protocol."""
