"""Wrappers that make third-party engines speak engines.protocol."""
