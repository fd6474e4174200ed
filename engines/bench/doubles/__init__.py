"""Stand-ins the bench's own tests and demonstrations use, kept apart from what it measures:
`fake` (protocol engines whose step costs are modelled on a virtual clock, so every figure is
known in advance) and `slowdown` (a planted slowdown, BENCH_SLOWDOWN, that proves a
regression gate has bite)."""
