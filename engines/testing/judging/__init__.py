"""What the checks (engines/testing/checks/) judge with, beside their own files: the Judge (what
a trace is compared against: requests alone, a reference engine, config variants), Violation
(what a check raises, through `check.fail(...)`, naming the request, the step, what was
expected and what was observed), the sentence pieces that name them (base), and the two views
of tenant isolation the `isolation` check combines: block tables (tenant_blocks) and an
engine's own count of cached prompt tokens (tenant_counts).
"""

from __future__ import annotations

from engines.testing.judging.base import Judge, Violation

__all__ = ["Judge", "Violation"]
