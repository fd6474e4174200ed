"""Common-mode bugs (issue 52 item 5): one mistake planted in each of engines/core's
processing functions, made alike by the paged engine and by the sequential reference (both
run engines/core's sampling, constraints, grammar, prompt-logprob and beam code). Parity
cannot see them (alone runs are as wrong as batched ones), nor reference parity against the
sequential reference (it is as wrong): only a reference that shares none of that code can,
engines.independent (each class's `reference`). `shared_reference` is the sequential
reference with the same bug: what a user passes as `--reference-engine` when the bug is in
engines/core. By default the suite sends every request that uses a feature to its
independent twin (engines.testing.routing), which catches the bug; with the routing off the
tests hold it to passing the same hunt.

Each bug is a patch of one engines/core function, in force only while the planted engine's
(or its shared reference's) add_request or step runs, so nothing else in the process sees
it; the functions are looked up by name at each call, so the patch reaches every caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

import engines.core.constraints as constraints
import engines.core.prompt_logprobs as prompt_logprobs_module
import engines.core.sampling as sampling
import engines.paged.engine as paged_engine
import engines.sequential as sequential
from engines.core.beams import BeamSearch
from engines.core.guided import Matcher
from engines.core.request_state import RequestState
from engines.independent import independent_reference
from engines.paged.engine import PagedEngine
from engines.protocol import Guided, Request, SamplingParams
from engines.sequential import SequentialEngine
from engines.testing.context import SuiteOptions, build_context
from engines.testing.verdict import verify
from engines.testing.workload import Workload
from tests.planted.constraint_bugs import bans_one_early
from tests.planted.harness import check_of, fresh_engines

__all__ = ["COMMON_MODE_PLANTED", "PROMPTS", "caught_only_by_the_independent_reference",
           "hard_case", "verdict"]

Patch = tuple[object, str, object]


@contextmanager
def _patched(patches: Sequence[Patch]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class _Seen:
    """A row's request state as the mask builders read it, under other parameters."""

    def __init__(self, seq: RequestState, params: SamplingParams) -> None:
        self.request = dataclasses.replace(seq.request, params=params)
        self.generator, self.output, self.matcher = seq.generator, seq.output, seq.matcher


def _masks_seeing(change: Callable[[SamplingParams], SamplingParams]) -> list[Patch]:
    """Both mask builders (the batched engines' and the sequential reference's) reading
    each row's parameters through `change`."""
    batch: Any = constraints.batch_mask
    row: Any = constraints.row_mask

    def batch_mask(seqs: Sequence[Any], vocab: int, device: torch.device) -> Any:
        return batch([_Seen(s, change(s.request.params)) for s in seqs], vocab, device)

    def row_mask(seq: Any, vocab: int, device: torch.device) -> Any:
        return row(_Seen(seq, change(seq.request.params)), vocab, device)

    return [(sampling, "batch_mask", batch_mask), (sequential, "row_mask", row_mask)]


def _penalize_seeing(change: Callable[[SamplingParams, Sequence[int]], tuple[
        SamplingParams, Sequence[int]]]) -> list[Patch]:
    """engines.core.sampling.penalize reading each row's parameters and prompt through
    `change`."""
    original = sampling.penalize

    def penalize(x: torch.Tensor, params: Sequence[SamplingParams],
                 prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]
                 ) -> torch.Tensor:
        seen = [change(p, prompt) for p, prompt in zip(params, prompts, strict=True)]
        return original(x, [p for p, _ in seen], [q for _, q in seen], outputs)

    return [(sampling, "penalize", penalize)]


class _Planted:
    """The bug's patches in force while add_request and step run."""

    @staticmethod
    def patches() -> list[Patch]:
        raise NotImplementedError

    def add_request(self, request: Any) -> None:
        with _patched(self.patches()):
            super().add_request(request)  # type: ignore[misc]

    def step(self) -> Any:
        with _patched(self.patches()):
            return super().step()  # type: ignore[misc]


# A feature's hard case: (prompt, its greedy continuation) -> the request's prompt and params.
Case = Callable[[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], SamplingParams]]


def _on(params: Callable[[tuple[int, ...]], SamplingParams]) -> Case:
    """A case on the prompt as it is, its params from the greedy continuation."""
    return lambda prompt, greedy: (prompt, params(greedy))


def _pair(name: str, doc: str, patches: Callable[[], list[Patch]], caught_by: str,
          case: Case) -> tuple[type, type]:
    """The planted paged engine and its shared (sequential) reference, module-level classes
    of their own names (a report's repro imports them by name). `case`: the feature's hard
    case, the params of a request given its prompt's greedy continuation."""
    ref = type(f"{name}Reference", (_Planted, SequentialEngine),
               {"__doc__": f"The sequential reference with {name}.", "__module__": __name__,
                "patches": staticmethod(patches)})
    bug = type(name, (_Planted, PagedEngine),
               {"__doc__": doc, "__module__": __name__, "patches": staticmethod(patches),
                "caught_by": caught_by, "reference": staticmethod(independent_reference),
                "shared_reference": ref, "case": staticmethod(case)})
    return bug, ref


# --- the bugs, one per engines/core processing function ------------------------------------------


def _repetition_over_output_only() -> list[Patch]:
    return _penalize_seeing(lambda p, prompt: (p, () if p.repetition_penalty != 1.0
                                               else prompt))


def _presence_sign_flipped() -> list[Patch]:
    return _penalize_seeing(lambda p, prompt: (dataclasses.replace(
        p, presence_penalty=-p.presence_penalty), prompt))


def _min_tokens_lets_last_stop_through() -> list[Patch]:
    # Step 1 of penalize masks all stop ids but the last (a slice's end off by one).
    return _penalize_seeing(lambda p, prompt: (dataclasses.replace(
        p, stop_token_ids=p.stop_token_ids[:-1]) if p.min_tokens else p, prompt))


def _bias_sign_flipped() -> list[Patch]:
    return _masks_seeing(lambda p: dataclasses.replace(
        p, logit_bias=tuple((t, -b) for t, b in p.logit_bias)))


def _allowed_ids_drop_last() -> list[Patch]:
    return _masks_seeing(lambda p: p if p.allowed_token_ids is None or len(
        p.allowed_token_ids) < 2 else dataclasses.replace(
            p, allowed_token_ids=p.allowed_token_ids[:-1]))


def _bad_word_prefix_one_early() -> list[Patch]:
    return [(constraints, "ending_bans", bans_one_early)]


def _stale_advance(self: Matcher, token: int) -> bool:
    # The grammar state moves on, its cached mask does not: each token is masked with the
    # previous position's allowed set.
    self._m.consume_token(token)
    return bool(self._m.is_stopped())


def _grammar_mask_one_token_stale() -> list[Patch]:
    return [(Matcher, "advance", _stale_advance)]


def _prompt_logprobs_shifted() -> list[Patch]:
    original = prompt_logprobs_module.prompt_entries

    def shifted(logits: torch.Tensor, targets: Sequence[int], k: int) -> Any:
        # Each target read from the position after its own (the last from its own).
        return original(torch.cat([logits[1:], logits[-1:]]), targets, k)

    return [(prompt_logprobs_module, "prompt_entries", shifted),
            (paged_engine, "prompt_entries", shifted)]


def _beam_length_counts_one_more() -> list[Patch]:
    original = BeamSearch.normalise

    def normalise(self: BeamSearch, logprobs: torch.Tensor, length: int) -> torch.Tensor:
        return original(self, logprobs, length + 1)

    return [(BeamSearch, "normalise", normalise)]


RepetitionOverOutputOnly, RepetitionOverOutputOnlyReference = _pair(
    "RepetitionOverOutputOnly", "The repetition penalty counts the output only, not the "
    "prompt (vLLM's and transformers' count both).", _repetition_over_output_only,
    # The prompt followed by its own continuation: what the model would repeat is in the
    # prompt, where only a penalty over the prompt reaches it.
    "reference_parity", lambda prompt, g: ((*prompt, *g), SamplingParams(
        max_tokens=10, repetition_penalty=2.0)))
PresenceSignFlipped, PresenceSignFlippedReference = _pair(
    "PresenceSignFlipped", "The presence penalty is added to a present token's logit, not "
    "subtracted.", _presence_sign_flipped, "reference_parity",
    _on(lambda g: SamplingParams(max_tokens=10, presence_penalty=1.5)))
MinTokensLetsLastStopThrough, MinTokensLetsLastStopThroughReference = _pair(
    "MinTokensLetsLastStopThrough", "min_tokens masks every stop id but the last one "
    "listed.", _min_tokens_lets_last_stop_through, "reference_parity",
    # The greedy first token, listed last: the correct engine may not take it before 4.
    _on(lambda g: SamplingParams(max_tokens=8, min_tokens=4, stop_token_ids=(g[5], g[0]))))
BiasSignFlipped, BiasSignFlippedReference = _pair(
    "BiasSignFlipped", "logit_bias is subtracted from the logit.", _bias_sign_flipped,
    "reference_parity", _on(lambda g: SamplingParams(max_tokens=8, logit_bias=((g[1], -30.0),))))
AllowedIdsDropLast, AllowedIdsDropLastReference = _pair(
    "AllowedIdsDropLast", "allowed_token_ids loses its last listed id (a slice's end off by "
    "one).", _allowed_ids_drop_last, "reference_parity",
    # The greedy first token listed last.
    _on(lambda g: SamplingParams(max_tokens=8,
                                 allowed_token_ids=(*sorted({*g[2:6]} - {g[0]}), g[0]))))
BadWordPrefixOneEarlyAlike, BadWordPrefixOneEarlyAlikeReference = _pair(
    "BadWordPrefixOneEarlyAlike", "A bad word's prefix is compared one position early "
    "(engines.core.constraints.ending_bans), in the engine and its reference alike.",
    _bad_word_prefix_one_early, "reference_parity",
    # A word of two tokens the request would complete.
    _on(lambda g: SamplingParams(max_tokens=8, bad_words=(g[2:4],))))
GrammarMaskOneTokenStale, GrammarMaskOneTokenStaleReference = _pair(
    "GrammarMaskOneTokenStale", "A grammar's cached mask is not cleared when a token is "
    "consumed: each token is masked with the previous position's allowed set.",
    _grammar_mask_one_token_stale, "reference_parity",
    _on(lambda g: SamplingParams(max_tokens=8, guided=Guided("regex", "(ab|cd)[0-9]x"))))
PromptLogprobsShifted, PromptLogprobsShiftedReference = _pair(
    "PromptLogprobsShifted", "Each prompt token's logprob is read one position late.",
    _prompt_logprobs_shifted, "prompt_logprobs",
    _on(lambda g: SamplingParams(max_tokens=2, prompt_logprobs=2)))
BeamLengthCountsOneMore, BeamLengthCountsOneMoreReference = _pair(
    "BeamLengthCountsOneMore", "Beam scores divide by (length + 1) ** length_penalty.",
    _beam_length_counts_one_more, "beam_search",
    _on(lambda g: SamplingParams(max_tokens=6, beam_width=3, n=2, stop_token_ids=g[1:2])))

COMMON_MODE_PLANTED: list[Any] = [
    RepetitionOverOutputOnly, PresenceSignFlipped, MinTokensLetsLastStopThrough,
    BiasSignFlipped, AllowedIdsDropLast, BadWordPrefixOneEarlyAlike, GrammarMaskOneTokenStale,
    PromptLogprobsShifted, BeamLengthCountsOneMore]


# The hard case's prompts: four requests, arriving over three steps (batched with each other).
PROMPTS = ((5, 17, 300, 42), (811, 9, 77), (1, 2, 3, 4, 5, 6), (640, 641, 13))


def hard_case(bug: Any) -> Workload:
    """The bug's feature, `bug.case`, on each of PROMPTS (given its greedy continuation on a
    correct engine)."""
    plain = SequentialEngine()
    requests = []
    for i, prompt in enumerate(PROMPTS):
        plain.add_request(Request(prompt, SamplingParams(max_tokens=8), request_id="g"))
        greedy: list[int] = []
        while plain.has_work():
            greedy += [t for o in plain.step() for t in o.token_ids]
        asked, params = bug.case(prompt, tuple(greedy))
        requests.append(Request(asked, params, request_id=f"r{i}"))
    return Workload(tuple(requests), (0, 0, 1, 2), label=f"{bug.__name__}'s hard case")


def verdict(bug: Any, reference: Any, engine: Any = None, *,
            independent: str = "auto") -> str | None:
    """How the bug's check fails its hard case on `engine` (default: the bug's) judged
    against `reference` (None: it passes), routed as --independent-reference says."""
    engine = engine or bug
    ctx = build_context(engine, name=engine.__name__,
                        spec=f"{engine.__module__}:{engine.__name__}",
                        options=SuiteOptions(reference=reference, independent=independent))
    fresh_engines(ctx)
    failure = verify(ctx, hard_case(bug), check_of(bug)).failure
    return None if failure is None else str(failure.error)


def caught_only_by_the_independent_reference(bug: Any) -> None:
    """The bug's check fails its hard case against the sequential reference that shares the
    bug, as the suite routes by default (its independent twin judges the feature), passes it
    with the routing off (the shared reference alone is blind), and the correct paged engine
    passes it against the routed sequential reference (no false alarm)."""
    __tracebackhide__ = True
    found = verdict(bug, bug.shared_reference)
    assert found is not None and found.startswith(f"{bug.caught_by}: "), found
    assert verdict(bug, bug.shared_reference, independent="off") is None, \
        "the shared reference saw the bug"
    assert verdict(bug, SequentialEngine, engine=PagedEngine) is None, "a false alarm"
