"""prefill_decode: a greedy request's decoded token t is what prefilling its prompt and its first
t tokens gives."""

from __future__ import annotations

from engines.protocol import SamplingParams
from engines.testing.checks.base import Check
from engines.testing.checks.parity import FORCED_TALLY
from engines.testing.features.tenants import FEATURE as TENANTS_FEATURE
from engines.testing.judging.base import Judge, describe, step_of_token, tops
from engines.testing.judging.processed import Forced
from engines.testing.recorder import Trace

__all__ = ["CHECK", "check_prefill_decode"]


def check_prefill_decode(check: Check, trace: Trace, judge: Judge) -> Forced:
    """For a greedy request that generated g0 g1 ... gn: serving prompt + g0..g(t-1) alone with
    max_tokens 1 yields g(t). The decode path must agree with the prefill path, which catches
    decode-only bugs that corrupt alone runs too (a position off by one in decode).

    The probe keeps the request's repetition penalty (over prompt and output, so the same
    tokens either way). Only where the next token is a function of the context alone: not for
    frequency or presence penalties (over the output only, which the probe has none of), nor
    for a token that min_tokens still held stop ids back from. Likewise the probe keeps the
    request's allowed ids and logit bias (the same whatever the output), and requests with
    bad words or a grammar (masks that depend on the output so far) are not probed.

    Under tie-aware parity a processed probe (a penalty, a bias, allowed ids) whose token
    differs is judged as parity judges a processed choice (engines.testing.judging.processed):
    against the reference's processed distribution at that context, forgiven at a near-tie of
    it (a raw near-tie says nothing of a penalized choice: a repetition_penalty < 1 can tie
    two tokens outside the raw top candidates). Returns those counts."""
    __tracebackhide__ = True
    forced = Forced()
    for r in trace.workload.requests:
        got = trace.tokens(r.request_id)
        p = r.params
        if p.temperature > 0 or len(got) < 2 or p.frequency_penalty or p.presence_penalty:
            continue
        if p.bad_words or p.guided is not None:
            continue
        own_tops = tops(trace, r.request_id)
        probe_params = SamplingParams(max_tokens=1, logprobs=p.logprobs,
                                      repetition_penalty=p.repetition_penalty,
                                      allowed_token_ids=p.allowed_token_ids,
                                      logit_bias=p.logit_bias)
        for t in sorted({1, len(got) // 2, len(got) - 1}):
            if t < p.min_tokens and p.stop_token_ids:
                continue
            context = (*r.prompt_token_ids, *got[:t])
            probe = judge.oracle(context, probe_params,
                                 lora_path=trace.lora_paths.get(r.request_id))
            how = judge.diverges(context, [got[t]], probe.tokens[:1],
                                 observed_top=own_tops[t:t + 1] if own_tops else None,
                                 expected_top=probe.top_logprobs, params=probe_params,
                                 forced=forced)
            if how is not None:
                raise check.fail(
                    f"{describe(r, trace)} decoded {got[t]} as its "
                    f"token {t} (step {step_of_token(trace, r.request_id, t)}), but "
                    f"prefilling its prompt and its first {t} token(s) {got[:t]} gives "
                    f"{list(probe.tokens[:1])} ({how.replace('alone', 'prefill')}).")
    return forced


CHECK = Check("prefill_decode", check_prefill_decode, draws=(TENANTS_FEATURE.use(),),
              tally=FORCED_TALLY)
