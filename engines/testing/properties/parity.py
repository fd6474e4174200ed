"""Token parity, against four oracles: the same factory serving each request alone, a
reference engine serving it alone, the engine's own prefill of what it decoded, and the same
workload on config variants."""

from __future__ import annotations

from collections.abc import Mapping

from engines.protocol import Request, SamplingParams
from engines.testing.check import Check
from engines.testing.coverage import Coverage, Tally
from engines.testing.oracle import NotServable
from engines.testing.properties.base import Judge, describe, step_of_token, tops
from engines.testing.recorder import EngineCrashed, Trace

__all__ = ["REFERENCE_TALLY", "check_parity", "check_prefill_decode", "check_reference_parity",
           "check_variants"]


def _owes_prefix_only(trace: Trace, r: Request, observed_len: int, expected_len: int) -> bool:
    # An aborted (or never finished) request owes a prefix of its tokens, no more.
    cut_short = r.request_id in trace.aborted_at or r.request_id not in trace.finished_at
    return cut_short and observed_len < expected_len


def check_parity(check: Check, trace: Trace, judge: Judge) -> None:
    """Every greedy or seeded request's tokens equal its tokens served alone on a fresh engine
    of the same factory (a prefix, if aborted or cut off)."""
    __tracebackhide__ = True
    for r in trace.workload.requests:
        if not judge.comparable(r.params):
            continue  # unseeded sampling (or sampling in tie-aware mode): nothing to compare
        alone = judge.oracle(r.prompt_token_ids, r.params,
                             lora_path=trace.lora_paths.get(r.request_id))
        got = trace.tokens(r.request_id)
        if _owes_prefix_only(trace, r, len(got), len(alone.tokens)):
            alone_tokens = alone.tokens[: len(got)]
        else:
            alone_tokens = alone.tokens
        how = judge.diverges(r.prompt_token_ids, got, alone_tokens,
                             observed_top=tops(trace, r.request_id),
                             expected_top=alone.top_logprobs)
        if how is not None:
            raise check.fail(f"{describe(r, trace)} diverged from its alone run "
                             f"{_where(trace, r, got, alone_tokens)}, {how}. Alone it generated "
                             f"{list(alone.tokens)}; in this workload {got}.")


def _where(trace: Trace, r: Request, got: list[int], expected: tuple[int, ...]) -> str:
    pos = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
               min(len(got), len(expected)))
    step = step_of_token(trace, r.request_id, pos)
    return f"in step {step}" if step is not None else "by the time it finished"


def check_reference_parity(check: Check, trace: Trace, judge: Judge) -> int:
    """Every greedy request's tokens equal what the reference engine (--reference-engine)
    generates for it alone. Catches what self-parity cannot: bugs that make batched and alone
    runs wrong alike (a dropped bias, RoPE off by one everywhere). A request under a LoRA
    adapter is compared where the reference serves the same adapter directory (under any
    name, or added through its LoRAManagement); the others are counted, not judged, and the
    count returned (REFERENCE_TALLY says it)."""
    __tracebackhide__ = True
    reference = judge.reference
    assert reference is not None, f"{check.name} needs a reference engine"
    unknown = 0  # requests under an adapter the reference cannot serve
    for r in trace.workload.requests:
        if r.params.temperature > 0:
            continue  # engines' samplers differ: only greedy tokens are comparable
        try:
            expected = reference(r.prompt_token_ids, r.params,
                                 lora_path=trace.lora_paths.get(r.request_id))
        except NotServable:
            unknown += 1
            continue
        got = trace.tokens(r.request_id)
        exp = expected.tokens
        if _owes_prefix_only(trace, r, len(got), len(exp)):
            exp = exp[: len(got)]
        how = judge.diverges(r.prompt_token_ids, got, exp, observed_top=tops(trace, r.request_id),
                             expected_top=expected.top_logprobs)
        if how is not None:
            raise check.fail(
                f"{describe(r, trace)} diverged from the reference "
                f"engine {_where(trace, r, got, exp)}, {how.replace('alone', 'reference')}"
                f". The reference generated {list(expected.tokens)}; this engine {got}.")
    return unknown


def check_prefill_decode(check: Check, trace: Trace, judge: Judge) -> None:
    """For a greedy request that generated g0 g1 ... gn: serving prompt + g0..g(t-1) alone with
    max_tokens 1 yields g(t). The decode path must agree with the prefill path, which catches
    decode-only bugs that corrupt alone runs too (a position off by one in decode).

    The probe keeps the request's repetition penalty (over prompt and output, so the same
    tokens either way). Only where the next token is a function of the context alone: not for
    frequency or presence penalties (over the output only, which the probe has none of), nor
    for a token that min_tokens still held stop ids back from. Likewise the probe keeps the
    request's allowed ids and logit bias (the same whatever the output), and requests with
    bad words or a grammar (masks that depend on the output so far) are not probed."""
    __tracebackhide__ = True
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
                                 expected_top=probe.top_logprobs)
            if how is not None:
                raise check.fail(
                    f"{describe(r, trace)} decoded {got[t]} as its "
                    f"token {t} (step {step_of_token(trace, r.request_id, t)}), but "
                    f"prefilling its prompt and its first {t} token(s) {got[:t]} gives "
                    f"{list(probe.tokens[:1])} ({how.replace('alone', 'prefill')}).")


def check_variants(check: Check, trace: Trace, judge: Judge) -> None:
    """The same workload on every config variant (--engine-variant) gives every greedy or
    seeded request the same tokens as the main engine (a prefix, for aborted requests)."""
    __tracebackhide__ = True
    assert judge.variants, f"{check.name} needs at least one --engine-variant"
    for name, run in judge.variants.items():
        try:
            other = run(trace.workload)
        except EngineCrashed as exc:
            crashed = check.fail(f"variant {name!r} crashed on this workload: {exc}")
            crashed.variant = name
            raise crashed from None
        for r in trace.workload.requests:
            if not judge.comparable(r.params):
                continue
            main, var = trace.tokens(r.request_id), other.tokens(r.request_id)
            if r.request_id in trace.aborted_at or r.request_id in other.aborted_at:
                n = min(len(main), len(var))
                main, var = main[:n], var[:n]
            how = judge.diverges(r.prompt_token_ids, var, main,
                                 observed_top=tops(other, r.request_id),
                                 expected_top=tops(trace, r.request_id))
            if how is not None:
                failure = check.fail(f"{describe(r, trace)} got {var} on variant {name!r} "
                                     f"but {main} on the main engine: "
                                     f"{how.replace('alone', 'main').replace('batched', name)}.")
                failure.variant = name  # the report replays this variant, not make_engine
                raise failure


UNSERVED = "tenants: requests under an adapter the reference cannot serve"


def _add_unserved(coverage: Coverage, unknown: int, check: str) -> None:
    coverage.counts[UNSERVED] += unknown or 0


def _unserved_notes(data: Mapping[str, int], check: str) -> list[str]:
    n = data.get(UNSERVED, 0)
    if not n:
        return []
    return [f"{check}: {n} request(s) under a LoRA adapter were not judged: the reference "
            "engine neither serves the adapter's directory (its `loras` declaration) nor has "
            "add_lora (engines.protocol.LoRAManagement)"]


REFERENCE_TALLY = Tally(_add_unserved, _unserved_notes)
