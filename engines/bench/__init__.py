"""Benchmarks for any engine that speaks engines.protocol."""
