"""Top logprobs asked of every drawn request (`SamplingParams.logprobs`, at least the check's
setting), so that a neighbour's logprobs handed to the wrong row differ from the alone run's.
A base field every engine takes; an engine that refuses them (llama-server's guided
configuration) leaves the check that uses this feature skipped (its Need), not this draw."""

from __future__ import annotations

from engines.testing.features.base import Feature

__all__ = ["FEATURE"]

FEATURE = Feature("top_logprobs", needs="nothing", declared=lambda limits: True,
                  configure=lambda limits, setting: {"logprobs": max(limits.logprobs, setting)})
