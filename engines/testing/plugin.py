"""pytest plugin entry point (filled in by the conformance suite work)."""
