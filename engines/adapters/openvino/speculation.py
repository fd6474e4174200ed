"""Speculative decoding in OpenVINO GenAI's continuous-batching pipeline, as an engine's
configuration (engines.protocol: speculation is no request's field).

Two kinds, each a pipeline property at construction and two GenerationConfig fields on every
request (the library refuses a request without them on a speculating pipeline):
- "draft": a draft model (`openvino_genai.draft_model`, the `tiny-draft` preset converted as the
  target is: same BPE, same vocabulary) proposes `num_assistant_tokens` tokens a step, which
  the target verifies in one forward;
- "prompt_lookup": n-gram lookup in the request's own tokens (`prompt_lookup=True`): the
  `num_assistant_tokens` tokens that followed the latest earlier occurrence of its last
  1..`max_ngram_size` tokens are the draft.

Counters (engines.protocol.Exercised): the library counts drafts and acceptances only in the
metrics of `generate()` (SDPerModelsPerfMetrics); neither `PipelineMetrics` (get_metrics())
nor a handle's outputs carry them under the step loop the adapter runs. So
`spec_draft_tokens` is absent (never faked), and `spec_accepted_tokens` is counted from the
outputs: a verified step gives a request its accepted drafts and one token of the target's,
so every token a request gains in one step beyond the first is an accepted draft.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ACCEPTED", "DRAFT_FILTERS", "DRAFT_SEEDS", "Speculation", "accepted_in"]

ACCEPTED = "spec_accepted_tokens"  # the Exercised counter this module can give
# openvino-genai 2026.4.1 (the newest): under a draft model, a seeded sampled request's tokens
# near its budget's end depend on the requests the pipeline served before it.
DRAFT_SEEDS = ("openvino-genai's speculative decoding with a draft model samples a seeded "
               "request's last tokens differently depending on the requests served before it "
               "(docs/findings.md report 33): seeded sampling is not reproducible there")
# And a sampled request whose filters leave one token (top_k 1, a tiny top_p) gets the draft
# model's greedy tokens, not the target's.
DRAFT_FILTERS = ("openvino-genai's speculative decoding with a draft model accepts the draft "
                 "model's tokens for a sampled request whose top_k / top_p / min_p leave one "
                 "token (docs/findings.md report 39): such a request is not the target's "
                 "greedy")

SpeculationKind = Literal["draft", "prompt_lookup"]


@dataclass(frozen=True, slots=True)
class Speculation:
    kind: SpeculationKind
    num_assistant_tokens: int = 3  # draft tokens proposed a step
    max_ngram_size: int = 2  # prompt lookup: the longest n-gram matched
    draft: str = "tiny-draft"  # draft model: a preset (converted once) or a checkpoint

    def properties(self, seed: int, device_properties: dict[str, Any]) -> dict[str, Any]:
        """The pipeline properties that turn it on; the draft runs under the same device
        properties (fp32, the same threads) as the target."""
        import openvino_genai

        from engines.adapters.openvino.convert import openvino_dir

        if self.kind == "prompt_lookup":
            return {"prompt_lookup": True}
        path = openvino_dir(self.draft, seed)
        return {"draft_model": openvino_genai.draft_model(str(path), "CPU", **device_properties)}

    def configure(self, gc: Any) -> None:
        """Set a request's GenerationConfig fields for it."""
        gc.num_assistant_tokens = self.num_assistant_tokens
        if self.kind == "prompt_lookup":
            gc.max_ngram_size = self.max_ngram_size

    def describe(self) -> str:
        if self.kind == "prompt_lookup":
            return (f"prompt lookup ({self.num_assistant_tokens} draft tokens a step, n-grams "
                    f"up to {self.max_ngram_size})")
        return f"draft model {self.draft} ({self.num_assistant_tokens} draft tokens a step)"


def accepted_in(tokens_this_step: int) -> int:
    """Accepted drafts among the tokens one request gained in one step."""
    return max(0, tokens_this_step - 1)
