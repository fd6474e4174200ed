"""An independent reference engine: one request at a time, its whole path from the model's
logits to its tokens other people's code, so that a bug in engines/core's processing (which
our engines and engines.sequential share) is one it does not make too.

From which library each part comes (docs/architecture.md, "The independent reference"):

- the forward, the KV cache and the decode loop: transformers' generate (DynamicCache);
- constraints, penalties, min_tokens, temperature and the filters: transformers' logits
  processors and warpers (engines.independent.processors says which, and how our protocol's
  meaning is given through their arguments);
- stop strings: transformers' StopStringCriteria; text: `tokenizers`' decode;
- guided decoding: llguidance's LLMatcher and bitmask helpers, used directly
  (engines.independent.grammar);
- beam search: generate's num_beams with early_stopping="never" (the protocol's rule: score =
  cumulative logprob / length ** length_penalty over the generated tokens);
- LoRA: PEFT; prompt and top logprobs: the model's forward and torch.log_softmax.

What no library has, written here from its definition and sharing no code with engines/core:
presence and frequency penalties with vLLM's semantics (engines.independent.processors).
The protocol's own rules, restated rather than imported: n > 1's seed rule (child i under seed
s + i) and the stop string's cut. Sampling is generate's torch.multinomial under
torch.manual_seed(seed): it draws what our engines draw (their sampler reproduces
multinomial's one-sample path on the request's own generator), though the suite compares only
greedy tokens with a reference.

Bad input is refused by engines.core.validation and LoRA names kept by engines.core.lora
(neither is processing); tests/test_layout.py holds the package to importing
nothing else of engines/core, nor any engine of ours.
"""

from __future__ import annotations

from engines.independent.engine import IndependentEngine

__all__ = ["IndependentEngine", "independent_bf16", "independent_reference"]


def independent_reference() -> IndependentEngine:
    """The independent reference on the default preset in fp32:
    `--reference-engine engines.independent:independent_reference`."""
    return IndependentEngine()


def independent_bf16() -> IndependentEngine:
    """The independent reference in bfloat16 (weights and compute), for an engine run in
    bf16 under tie-aware parity."""
    return IndependentEngine(dtype="bfloat16")
