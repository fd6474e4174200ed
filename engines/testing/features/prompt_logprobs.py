"""Prompt logprobs asked of every drawn request (`SamplingParams.prompt_logprobs`, the check's
setting: candidates per prompt position), for engines that declare them: the
`prompt_logprobs` check judges what comes back beside whatever else is in flight."""

from __future__ import annotations

from engines.protocol import PROMPT_LOGPROBS_FIELD
from engines.testing.features.base import Feature

__all__ = ["FEATURE"]

FEATURE = Feature("prompt_logprobs", needs="prompt_logprobs in supported_sampling (of the engine "
                  "and of every engine it is compared with)",
                  declared=lambda limits: PROMPT_LOGPROBS_FIELD in limits.sampling_fields,
                  configure=lambda limits, setting: {"prompt_logprobs": setting})
