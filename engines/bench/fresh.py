"""Prompts no earlier run of a comparison sent: each paired run's trace with every prompt's
first token moved by the run's number.

The bench replays one trace many times: the closed stage's warm-up and recorded runs, and
every probe of a capacity or goodput search (the same requests on a stretched time axis).
An engine with a prefix cache would find the previous run's prompts still cached and skip
their prefill, so a recorded rate, and a probe's verdict, would depend on which runs came
before it and on how much of them the cache kept, not on the engine's speed. Measured on the
tiny preset, 16 seats over 8 contexts of KV: our paged engine found 1,264 of the compare
closed trace's 5,915 prompt tokens cached from the run before, every run; OpenVINO GenAI's
capacity in `compare --quick` was 1.39x with its prefix cache on what it was with it off
(docs/benchmarks.md, "Replays fresh to the engines' caches").

Every prompt of a run moves by the same amount, so what prompts share inside one trace
(a real trace's common system prompt) they still share, and a prefix cache still earns
those hits; only hits on an earlier run's prompts are gone. Lengths, budgets and arrival
times are the trace's own: every measurement that reads the trace reads the same workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from engines.bench.draws import WorkItem
from engines.bench.traces import ArrivalTrace

NOTE = ("prompts: fresh to every run (its prompts' first token shifted by the run's number, "
        "engines.bench.fresh): no run finds an earlier run's prompts in a prefix cache")
EXACT_NOTE = ("prompts: every run sends the trace's prompts as drawn (--exact-prompts): an "
              "engine with a prefix cache may find earlier runs' prompts in it, and its "
              "closed runs and probes then measure it warm")


def note(fresh: bool) -> str:
    """The line the output gives the run's prompts."""
    return NOTE if fresh else EXACT_NOTE


def shifted(prompt: tuple[int, ...], run: int, vocab_size: int) -> tuple[int, ...]:
    """`prompt` as run number `run` sends it: the first token moved by `run` (mod the
    vocabulary), the second by `run // vocab_size` once the first has wrapped around, so
    runs stay distinct past vocab_size runs for prompts of two tokens or more."""
    if run == 0 or not prompt:
        return prompt
    head = [(prompt[0] + run) % vocab_size]
    if len(prompt) > 1:
        head.append((prompt[1] + run // vocab_size) % vocab_size)
    return (*head, *prompt[len(head):])


@dataclass(slots=True)
class FreshPrompts:
    """Numbers a comparison's paired runs (shared by every RunContext derived from one) and
    gives each its trace shifted by its number: run 0 sends the trace as drawn."""

    vocab_size: int
    runs: int = 0

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size: must be >= 2 to shift prompts, got {self.vocab_size}")

    def next(self, traces: Mapping[str, ArrivalTrace]) -> dict[str, ArrivalTrace]:
        """The traces of the next paired run: one number for the run, every engine's trace
        shifted by it (engines searched at different rates get different traces of the same
        requests, and still the same prompts)."""
        run, self.runs = self.runs, self.runs + 1
        done: dict[int, ArrivalTrace] = {}
        for trace in traces.values():
            if id(trace) not in done:
                done[id(trace)] = self._shift(trace, run)
        return {name: done[id(trace)] for name, trace in traces.items()}

    def _shift(self, trace: ArrivalTrace, run: int) -> ArrivalTrace:
        if run == 0:
            return trace
        arrivals = tuple(
            replace(a, item=WorkItem(shifted(a.item.prompt_token_ids, run, self.vocab_size),
                                     a.item.max_tokens))
            for a in trace.arrivals)
        return replace(trace, arrivals=arrivals)
