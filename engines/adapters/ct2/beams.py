"""Beam search on CTranslate2 (`generate_batch(beam_size=..., num_hypotheses=...)`), mapped to
the protocol's: `beam_width` beams, the `n` best by cumulative logprob / length **
length_penalty returned as children 0..n-1, best first, a beam ending at a stop id (kept).

Every option of a beam search is the library's whole batch's (beam size, hypotheses, length
penalty, end tokens, maximum length), so only requests equal in all of them share a batch
(`beam_key`), and each runs to its budget unless a stop id ends it.

Early stopping: the library ends a beam search once beam_size x `patience` hypotheses have
finished (patience 1 by default, transformers' `early_stopping=True`), which can return a
beam ended early by a stop id over a longer one of better score. The protocol's beam search
keeps searching to the budget, so the adapter passes a patience no search can reach (more
finished hypotheses than the beams could produce in max_tokens steps): the library then
returns what transformers' `generate(num_beams=..., early_stopping="never")` returns
(tests/adapters/ct2/test_beams.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engines.adapters.ct2.bad_words import bad_words_key, suppress_sequences
from engines.protocol import Request

__all__ = ["beam_key", "run_beams"]


def beam_key(request: Request) -> tuple[Any, ...]:
    """What a beam-search request must share with the others of its batch."""
    p = request.params
    one = len(request.prompt_token_ids) == 1  # report 14: never beside longer prompts
    return ("beam", p.beam_width, p.n, float(p.length_penalty), p.max_tokens,
            tuple(sorted(set(p.stop_token_ids))), one, bad_words_key(request))


def run_beams(generator: Any, prompts: Sequence[Sequence[str]], request: Request,
              words: Sequence[str]) -> list[list[list[int]]]:
    """Per prompt, its n best beams as token ids, best first (one batch, run to its end);
    `request` is any of the batch's (they share every option: beam_key)."""
    params = request.params
    index = {w: i for i, w in enumerate(words)}
    results = generator.generate_batch(
        [list(p) for p in prompts],
        max_length=params.max_tokens,
        include_prompt_in_result=False,
        beam_size=params.beam_width,
        num_hypotheses=params.n,
        length_penalty=float(params.length_penalty),
        # More finished hypotheses than the search can make: it never stops early (above).
        patience=float(params.max_tokens + 1),
        end_token=sorted(set(params.stop_token_ids)),
        return_end_token=True,  # the protocol keeps the stop id in the output
        sampling_topk=1,
        suppress_sequences=suppress_sequences(request, words),
    )
    return [[[index[w] for w in hyp] for hyp in r.sequences] for r in results]
