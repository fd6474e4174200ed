"""The seed workload of the `sequence_distribution` check: SEQUENCE_DRAWS unseeded sampled
requests of one fixed prompt, each SEQUENCE_TOKENS tokens long, arriving in waves, so that a
speculating engine verifies drafts for some rows while others prefill. Their first tokens
are judged against the reference engine's distribution position by position
(engines.testing.checks.sequence_distribution); no seed is needed, so engines that declare no
`seed` (or declare seeds broken) are judged too.

The prompt repeats a 3-token chunk: a prompt-lookup drafter finds its continuation at once
(drafts that may be accepted), a draft model drafts anything.
"""

from __future__ import annotations

from engines.protocol import Request, SamplingParams
from engines.testing.features.base import AloneFn, Drawing, Feature, Make
from engines.testing.workload import Workload

__all__ = ["FEATURE", "SEQUENCE_DRAWS", "SEQUENCE_PROMPT", "SEQUENCE_TEMPERATURE",
           "SEQUENCE_TOKENS", "WAVES", "sequence_workload"]

# Requests a run: 23 tokens judged each (the first is sampling_distribution's), 3,680 in
# all; the false-alarm bound, the power and the measured rates:
# engines.testing.checks.sequence_distribution.
SEQUENCE_DRAWS = 160
# Tokens a request: the first is drawn after the prompt as in any engine; a speculating
# engine drafts the next ones, several steps of drafts (k = 3: 3 drafts, then a bonus). 24,
# not 8 (issue 52): three times the judged tokens for one reference call a sequence still,
# which an acceptance ratio off by the draft's probability needs to fail every run.
SEQUENCE_TOKENS = 24
# Temperature 1: the reference's raw top logprobs are its distribution, whole or not.
SEQUENCE_TEMPERATURE = 1.0
SEQUENCE_PROMPT = (21, 8, 305, 21, 8, 305, 21, 8)  # token ids modulo the vocabulary
WAVES = 4  # arrival steps 0..WAVES-1, round robin


def sequence_workload(limits: Drawing) -> Workload:
    """limits.sequence_draws unseeded requests of SEQUENCE_PROMPT, arriving in WAVES."""
    room = max(1, limits.max_model_len - SEQUENCE_TOKENS)
    prompt = tuple(t % limits.vocab_size for t in SEQUENCE_PROMPT[:room])
    budget = max(1, min(SEQUENCE_TOKENS, limits.max_model_len - len(prompt)))
    params = SamplingParams(max_tokens=budget, temperature=SEQUENCE_TEMPERATURE)
    n = limits.sequence_draws
    reqs = tuple(Request(prompt, params, request_id=f"r{i}") for i in range(n))
    return Workload(reqs, tuple(i % WAVES for i in range(n)),
                    label="unseeded sampled sequences of one prompt")


def _seeds(drawing: Drawing, req: Make, alone: AloneFn | None) -> list[Workload]:
    return [sequence_workload(drawing)] if drawing.sequence_draws else []


FEATURE = Feature("sequence_draws", needs="temperature in supported_sampling (of the engine and "
                  "of every engine it is compared with)",
                  declared=lambda limits: "temperature" in limits.sampling_fields,
                  configure=lambda limits, setting: {"sequence_draws": setting}, seeds=_seeds)
