"""One request (one child) served by transformers' generate: its loop, its DynamicCache, the
processors of engines.independent.processors, its stopping criteria; beam search by its own
num_beams; prompt logprobs from one teacher-forced forward and torch.log_softmax."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig
from transformers.generation import StoppingCriteriaList

from engines.independent.grammar import Grammar, GrammarStop
from engines.independent.processors import processors
from engines.independent.text import AfterMinTokens, stop_criterion
from engines.protocol import FinishReason, SamplingParams

__all__ = ["Generated", "beams", "generate", "prompt_logprobs"]


@dataclass(frozen=True, slots=True)
class Generated:
    tokens: tuple[int, ...]
    finish_reason: FinishReason
    top_logprobs: tuple[Mapping[int, float], ...] | None  # raw, where asked
    logprobs: tuple[float, ...] | None  # the chosen tokens' raw logprobs, where asked
    stopped_by_string: bool = False


def _config(p: SamplingParams, *, do_sample: bool = False, **extra: Any) -> GenerationConfig:
    """A GenerationConfig whose own processors are all off: generate fills a sampling field
    left at None with its default (top_k 50), which would filter every sampled request; ours
    are passed as logits_processor instead."""
    stops = list(p.stop_token_ids) or None
    off: dict[str, Any] = {"top_k": 0, "top_p": 1.0, "temperature": 1.0} if do_sample else {}
    return GenerationConfig(max_new_tokens=p.max_tokens, eos_token_id=stops,
                            pad_token_id=stops[0] if stops else 0, do_sample=do_sample,
                            repetition_penalty=1.0, use_cache=True, **off, **extra)


def _tops(logits: Sequence[torch.Tensor], tokens: Sequence[int], k: int
          ) -> tuple[tuple[Mapping[int, float], ...], tuple[float, ...]]:
    """Each position's k most likely ids and the chosen one's, of the raw distribution."""
    tops, chosen = [], []
    for row, token in zip(logits, tokens, strict=True):
        raw = torch.log_softmax(row[0].float(), dim=-1)
        values, ids = raw.topk(k)
        top = dict(zip(ids.tolist(), values.tolist(), strict=True))
        top.setdefault(int(token), float(raw[token]))
        tops.append(top)
        chosen.append(float(raw[token]))
    return tuple(tops), tuple(chosen)


@torch.inference_mode()
def generate(model: Any, prompt: Sequence[int], p: SamplingParams, *, seed: int | None,
             grammar: Grammar | None, hf_tokenizer: Any) -> Generated:
    """One child: greedy, or sampled under `seed` (None: a fresh one)."""
    ids = torch.tensor([list(prompt)], device=model.device)
    n = len(prompt)
    criteria: list[Any] = []
    if grammar is not None:
        criteria.append(GrammarStop(grammar))
    strings: AfterMinTokens | None = None
    if p.stop:
        strings = stop_criterion(hf_tokenizer, p.stop, n, p.min_tokens)
        criteria.append(strings)
    config = _config(p, do_sample=p.temperature > 0.0, return_dict_in_generate=True,
                     output_logits=bool(p.logprobs))
    with torch.random.fork_rng(devices=[]):  # the process's RNG left as it was
        torch.manual_seed(secrets.randbits(63) if seed is None else seed)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                             logits_processor=processors(p, n, grammar),
                             stopping_criteria=StoppingCriteriaList(criteria))
    tokens = tuple(out.sequences[0, n:].tolist())
    by_string = strings is not None and strings.fired
    stopped = (by_string or (grammar is not None and grammar.stopped)
               or (bool(tokens) and tokens[-1] in p.stop_token_ids))
    tops = chosen = None
    if p.logprobs:
        tops, chosen = _tops(out.logits, tokens, p.logprobs)
    return Generated(tokens, FinishReason.STOP if stopped else FinishReason.LENGTH, tops,
                     chosen, by_string)


@torch.inference_mode()
def beams(model: Any, prompt: Sequence[int], p: SamplingParams
          ) -> list[tuple[tuple[int, ...], FinishReason]]:
    """generate's n best beams (early_stopping "never": engines.protocol's rule, the score
    cumulative logprob / length ** length_penalty), each cut after its first stop id
    (generate pads the shorter beams with it)."""
    ids = torch.tensor([list(prompt)], device=model.device)
    # min_new_tokens: generate's own processor, -inf on the stop ids over the log-softmax.
    config = _config(p, num_beams=p.beam_width, num_return_sequences=p.n,
                     length_penalty=p.length_penalty, early_stopping="never",
                     min_new_tokens=p.min_tokens or None)
    rows = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    out = []
    for row in rows[:, len(prompt):].tolist():
        end = next((k + 1 for k, t in enumerate(row) if t in p.stop_token_ids), len(row))
        beam = tuple(row[:end])
        stop = bool(beam) and beam[-1] in p.stop_token_ids
        out.append((beam, FinishReason.STOP if stop else FinishReason.LENGTH))
    return out


@torch.inference_mode()
def prompt_logprobs(model: Any, prompt: Sequence[int], k: int
                    ) -> tuple[Mapping[int, float] | None, ...]:
    """None at position 0; then each prompt token's raw logprob given the prompt before it,
    beside the k most likely ids'."""
    ids = torch.tensor([list(prompt)], device=model.device)
    raw = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    entries: list[Mapping[int, float] | None] = [None]
    for pos, token in enumerate(prompt[1:]):
        values, top = raw[pos].topk(k)
        entry = dict(zip(top.tolist(), values.tolist(), strict=True))
        entry.setdefault(int(token), float(raw[pos, token]))
        entries.append(entry)
    return tuple(entries)
