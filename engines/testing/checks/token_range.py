"""token_range: every emitted token id, and every top_logprobs candidate, is in
0..vocab_size-1."""

from __future__ import annotations

import operator

from engines.testing.checks.base import Check
from engines.testing.judging.base import Judge, describe
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_token_range"]


def _is_id(token: object, vocab: int) -> bool:
    # Integers of any kind (numpy's too) but not bools, as the protocol's validation reads ids.
    return (not isinstance(token, bool) and hasattr(token, "__index__")
            and 0 <= operator.index(token) < vocab)  # type: ignore[call-overload]


def check_token_range(check: Check, trace: Trace, judge: Judge) -> None:
    """Every emitted token id, and every top_logprobs candidate, is in 0..vocab_size-1."""
    __tracebackhide__ = True
    vocab = trace.vocab_size
    for r in trace.workload.requests:
        for step, out in trace.outputs.get(r.request_id, []):
            cands = [t for top in out.top_logprobs or () for t in top]
            bad = [t for t in (*out.token_ids, *cands) if not _is_id(t, vocab)]
            if bad:
                raise check.fail(f"{describe(r, trace)} got token id {bad[0]!r} in step "
                                 f"{step} ({out}). Expected ids in 0..{vocab - 1} (vocab_size "
                                 f"{vocab}).")


CHECK = Check("token_range", check_token_range)
